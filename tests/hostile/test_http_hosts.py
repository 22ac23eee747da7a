"""Hostile HTTP clients against a real broker's listener (hb-http) over real
sockets: a browser whose page's DNS name was rebound to the listener's
address (its requests name that name in Host) reads nothing, while an IP
address, localhost and a name of http.allowed.hosts are answered; and one
client address cannot hold more than http.max.connections.per.client
connections, whether it comes as IPv4 or as IPv4-mapped IPv6, while its
connections within the limit are served and a closed one frees its place."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.http.support import closed_within, connect, read_answer, wait_http
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill
from tests.ports import free_port

ALLOWED = "broker.example.test"
PER_CLIENT = 16  # the default of http.max.connections.per.client


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("http-hosts"), **{"http.allowed.hosts": ALLOWED})
    broker.http_port = free_port()
    # the same 127.0.0.1 also through an IPv6 socket: its IPv4 peers come as ::ffff:127.0.0.1
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::ffff:127.0.0.1", 0))
        broker.mapped_port = probe.getsockname()[1]
    broker.settings["http.listeners"] = (f"http://127.0.0.1:{broker.http_port},"
                                         f"http://[::ffff:127.0.0.1]:{broker.mapped_port}")
    broker.start()
    wait_http(broker.http_port)
    yield broker
    stop_or_kill(broker)


@pytest.fixture
def port(served):
    pid = served.workers()["hb-http"]
    yield served.http_port
    assert served.workers().get("hb-http") == pid, "hb-http was replaced"
    with served.client() as client:
        client.metadata()


def ask(port: int, path: str, host: str, method: str = "GET", version: str = "1.1",
        refused: bool = True):
    """One request naming ``host``; (status, head, body, closed after it). A
    refused request's connection is given 10 s to close (a loaded machine),
    an answered one 1 s to show it stays open."""
    with connect(port) as sock:
        sock.sendall(f"{method} {path} HTTP/{version}\r\nHost: {host}\r\n\r\n".encode())
        answer = read_answer(sock, head_only=method == "HEAD")
        assert answer is not None, f"{host}: closed with no answer"
        sock.settimeout(10.0 if refused else 1.0)
        try:
            closed = sock.recv(1) == b""
        except socket.timeout:
            closed = False
        except ConnectionResetError:
            closed = True
    return answer, closed


@pytest.mark.parametrize("path", ["/metrics", "/api/topics", "/api/broker", "/", "/nope"])
@pytest.mark.parametrize("host", ["rebound.attacker.test", "rebound.attacker.test:{port}",
                                  "REBOUND.attacker.test.", "localhost.attacker.test",
                                  "127.0.0.1.attacker.test", "broker.example.test.attacker.test"])
def test_a_rebound_name_reads_nothing(port, served, path, host):
    errors = served.counter("http", "errors")
    answer, closed = ask(port, path, host.format(port=port))
    assert answer.status == 421, answer
    assert "http.allowed.hosts" in answer.json()["error"]
    assert answer.headers["connection"] == "close" and closed
    assert b"hostbroker_" not in answer.body and b"topics" not in answer.body
    assert served.counter("http", "errors") == errors + 1


def test_a_rebound_name_is_refused_with_head_and_http_1_0_too(port):
    answer, closed = ask(port, "/metrics", "rebound.attacker.test", method="HEAD")
    assert answer.status == 421 and closed
    answer, closed = ask(port, "/metrics", "rebound.attacker.test", version="1.0")
    assert answer.status == 421 and closed
    with connect(port) as sock:  # HTTP/1.0 naming no host is not let through either
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        raw = closed_within(sock, 5.0)
    assert raw.startswith(b"HTTP/1.1 400 ") and b"Host" in raw and b"hostbroker_" not in raw


def test_a_target_naming_a_host_is_refused(port):
    for target in (f"http://127.0.0.1:{port}/metrics", "http://rebound.attacker.test/metrics"):
        with connect(port) as sock:
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            raw = closed_within(sock, 5.0)
        assert raw.startswith(b"HTTP/1.1 400 ") and b"hostbroker_" not in raw


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:{port}", "[::1]:{port}", "localhost",
                                  "localhost:{port}", "LOCALHOST.", "broker.example.test",
                                  "Broker.Example.Test.:{port}"])
def test_an_ip_address_localhost_and_an_allowed_name_are_answered(port, host):
    host = host.format(port=port)
    answer, closed = ask(port, "/metrics", host, refused=False)
    assert answer.status == 200 and b"hostbroker_" in answer.body and not closed
    answer, _ = ask(port, "/api/topics", host, refused=False)
    assert answer.status == 200 and "topics" in answer.json()


def test_after_a_refused_host_the_connection_s_next_request_is_not_read(port):
    with connect(port) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: rebound.attacker.test\r\n\r\n"
                     b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        raw = closed_within(sock, 5.0)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 421 ") and b"HTTP/1.1" not in body
    assert "http.allowed.hosts" in json.loads(body)["error"]


# -- one client's connections ---------------------------------------------------------

def served_on(sock: socket.socket, buf: bytearray) -> int:
    sock.sendall(b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = read_answer(sock, buf)
    assert answer is not None, "closed"
    return answer.status


def refused(sock: socket.socket) -> bytes:
    raw = closed_within(sock, 5.0)
    assert raw.startswith(b"HTTP/1.1 503 "), raw[:200]
    return raw


def test_one_address_holds_at_most_its_connections_and_a_closed_one_frees_its_place(
        port, served):
    socks = [connect(port) for _ in range(PER_CLIENT)]
    try:
        buffers = [bytearray() for _ in socks]
        assert [served_on(s, b) for s, b in zip(socks, buffers)] == [404] * PER_CLIENT
        errors = served.counter("http", "errors")
        with connect(port) as extra:  # the 17th: a 503 naming the setting, then closed
            raw = refused(extra)
        assert b"http.max.connections.per.client" in raw
        assert served.counter("http", "errors") == errors + 1
        # the 16 are served on, each kept alive
        assert [served_on(s, b) for s, b in zip(socks, buffers)] == [404] * PER_CLIENT
        socks.pop().close()
        deadline = time.monotonic() + 5  # its place is free once hb-http saw it close
        while True:
            sock = connect(port)
            sock.sendall(b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = read_answer(sock)
            if answer is not None and answer.status == 404:
                socks.append(sock)
                break
            sock.close()
            assert time.monotonic() < deadline, "a closed connection did not free its place"
            time.sleep(0.05)
        with connect(port) as extra:  # full again
            refused(extra)
    finally:
        for sock in socks:
            sock.close()


def test_ipv4_mapped_ipv6_is_the_same_client(port, served):
    mapped = served.mapped_port
    half = PER_CLIENT // 2
    socks = [connect(port) for _ in range(half)]
    socks += [socket.create_connection(("127.0.0.1", mapped), timeout=10) for _ in range(half)]
    try:
        buffers = [bytearray() for _ in socks]
        assert [served_on(s, b) for s, b in zip(socks, buffers)] == [404] * PER_CLIENT
        for where in (port, mapped):  # one more, through either family, is refused
            with socket.create_connection(("127.0.0.1", where), timeout=10) as extra:
                assert b"http.max.connections.per.client" in refused(extra)
    finally:
        for sock in socks:
            sock.close()
