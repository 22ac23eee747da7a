"""The Host rule of the HTTP listener (the defence against DNS rebinding) and the
key a peer is counted under for http.max.connections.per.client, in memory:
every form of Host a client can send, the setting's checking, and the
connection machine refusing a Host before any route is looked at."""

from __future__ import annotations

import json
import socket

import pytest

from hostbroker.config import Config
from hostbroker.errors import ConfigError
from hostbroker.settings_http import allowed_hosts, allowed_hosts_problem
from hostbroker.web.router import Router, json_response
from hostbroker.web.server import HttpConnection, Limits, host_problem
from hostbroker.workers.http.worker import client_key

NONE = frozenset()
SOME = allowed_hosts("Broker.Example.COM, metrics.internal.")


@pytest.mark.parametrize("host", [
    "127.0.0.1", "127.0.0.1:9644", "127.0.0.1.", "127.0.0.1.:9644", "10.1.2.3:80",
    "0.0.0.0", "[::1]", "[::1]:9644", "[::ffff:127.0.0.1]:1", "[fe80::1]", "[2001:db8::1]:",
    "localhost", "localhost:9644", "LOCALHOST", "LocalHost.:9644", "localhost:",
])
def test_an_ip_address_or_localhost_is_answered_with_no_setting(host):
    assert host_problem(host, NONE) is None


@pytest.mark.parametrize("host", [
    "evil.example", "evil.example:9644", "attacker.test.", "127.0.0.1.evil.example",
    "localhost.evil.example", "evil-localhost", "x.localhost", "broker.example.com",
    "127.1", "2130706433", "0x7f.0.0.1", "127.000.000.001", "127.0.0.1.1", "[127.0.0.1]",
    "::1", "[::1", "[::1]x", "[::1]:x", "[::1]]", "[evil.example]", "127.0.0.1:80:80",
    "127.0.0.1:port", "127.0.0.1:123456", ":9644", ".", "localhost..", "user@127.0.0.1",
    "127.0.0.1 evil", "evil.example, 127.0.0.1", "*", "local%68ost", "h_:1",
])
def test_any_other_host_is_refused_naming_the_setting(host):
    problem = host_problem(host, NONE)
    assert problem is not None and "http.allowed.hosts" in problem and "\n" not in problem


@pytest.mark.parametrize("host", [
    "broker.example.com", "BROKER.example.com:9644", "broker.example.com.",
    "metrics.internal", "Metrics.Internal.:80", "127.0.0.1", "localhost",
])
def test_a_name_of_the_setting_is_answered_whatever_its_case_port_or_dot(host):
    assert host_problem(host, SOME) is None


@pytest.mark.parametrize("host", ["example.com", "evil.broker.example.com",
                                  "broker.example.com.evil", "metrics", "internal"])
def test_only_the_names_themselves_are_answered(host):
    assert host_problem(host, SOME) is not None


@pytest.mark.parametrize("host", ["evil.example", "anything:1", "[::1", "a b"])
def test_a_star_answers_any_host(host):
    assert host_problem(host, allowed_hosts("*")) is None
    assert host_problem(host, allowed_hosts("broker.example.com,*")) is None


def test_the_setting_is_checked_and_normalized():
    assert allowed_hosts("") == NONE and allowed_hosts(" , ") == NONE
    assert SOME == {"broker.example.com", "metrics.internal"}
    assert Config.build()["http.allowed.hosts"] == ""
    config = Config.build(overrides=["http.allowed.hosts=a.example,*"])
    assert Limits.from_config(config).allowed_hosts == {"a.example", "*"}
    config = Config.build({"http": {"allowed": {"hosts": ["a.example", "B.example"]}}})
    assert Limits.from_config(config).allowed_hosts == {"a.example", "b.example"}


@pytest.mark.parametrize("value", ["a.example:9644", "http://a.example", "a b", "a..b",
                                   "*.example", "-a.example", "caf\u00e9.example",
                                   "a/b", "[::1]", "x" * 64 + ".example"])
def test_a_bad_entry_refuses_the_start_in_one_line(value):
    assert allowed_hosts_problem(value) is not None
    with pytest.raises(ConfigError) as e:
        Config.build(overrides=[f"http.allowed.hosts=ok.example,{value}"])
    assert str(e.value).startswith("http.allowed.hosts: ") and "\n" not in str(e.value)


# -- the connection machine ---------------------------------------------------------

def machine(allowed=NONE):
    calls = []
    router = Router()
    router.add("GET", "/metrics", lambda req: calls.append(req) or json_response({}))
    router.add("POST", "/api/topics", lambda req: calls.append(req) or json_response({}))
    limits = Limits(request_max_bytes=4096, allowed_hosts=allowed)
    return HttpConnection(router, limits, "127.0.0.1:5000", now=0.0), calls


def drain_raw(conn: HttpConnection) -> bytes:
    raw = b""
    while conn.output:
        piece = bytes(conn.output)
        raw += piece
        conn.sent(len(piece), 0.0)
    return raw


def answer(conn: HttpConnection) -> tuple[int, bytes, dict]:
    head, _, body = drain_raw(conn).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head, json.loads(body)


@pytest.mark.parametrize("raw", [
    b"GET /metrics HTTP/1.1\r\nHost: evil.example:9644\r\n\r\n",
    b"GET /no/such/page HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    b"HEAD /metrics HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    b"GET /metrics HTTP/1.0\r\nHost: evil.example\r\n\r\n",
    # refused on its head: the body is never waited for
    b"POST /api/topics HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 100\r\n\r\n",
])
def test_a_foreign_host_is_421_before_any_route_and_the_connection_closed(raw):
    conn, calls = machine()
    conn.received(raw + b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 0.0)
    if raw.startswith(b"HEAD "):  # the head of the answer only: no body follows
        written = drain_raw(conn)
        assert written.startswith(b"HTTP/1.1 421 ") and written.endswith(b"\r\n\r\n")
        assert b"Connection: close" in written and b"Content-Length: " in written
    else:
        status, head, body = answer(conn)
        assert status == 421 and b"Connection: close" in head
        assert "http.allowed.hosts" in body["error"]
    assert conn.done and calls == []  # nor the request after it


def test_an_allowed_host_reaches_its_route():
    conn, calls = machine(allowed_hosts("broker.example.com"))
    for host in (b"127.0.0.1:9644", b"[::1]:9644", b"localhost", b"Broker.Example.Com."):
        conn.received(b"GET /metrics HTTP/1.1\r\nHost: " + host + b"\r\n\r\n", 0.0)
        assert answer(conn)[0] == 200
    assert len(calls) == 4 and not conn.closing


@pytest.mark.parametrize("raw, status", [
    (b"GET /metrics HTTP/1.0\r\n\r\n", 400),  # no Host, whatever the version
    (b"GET /metrics HTTP/1.1\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost:\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", 400),
    # a target naming its host (absolute form, a proxy's request) is refused whatever
    # host it names, so the Host header is the only host a request can name
    (b"GET http://evil.example/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (b"GET http://127.0.0.1/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    (b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n", 400),
    (b"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
])
def test_a_request_without_one_plain_host_is_refused(raw, status):
    conn, calls = machine(allowed_hosts("*"))
    conn.received(raw, 0.0)
    got, _, body = answer(conn)
    assert got == status and body["error"] and conn.done and calls == []


# -- who a peer is, for http.max.connections.per.client --------------------------------

@pytest.mark.parametrize("address, key", [
    (("127.0.0.1", 5000), "127.0.0.1"),
    (("::ffff:127.0.0.1", 5000, 0, 0), "127.0.0.1"),
    (("::FFFF:7f00:1", 5000, 0, 0), "127.0.0.1"),
    (("0:0:0:0:0:ffff:7f00:0001", 1, 0, 0), "127.0.0.1"),
    (("::1", 5000, 0, 0), "::1"),
    (("0:0:0:0:0:0:0:1", 5000, 0, 0), "::1"),
    (("2001:DB8::1", 1, 0, 0), "2001:db8::1"),
    (("fe80::1%lo", 1, 0, 1), "fe80::1"),
])
def test_a_peer_counts_as_its_ip_address_in_one_form(address, key):
    assert client_key(address) == key


def test_the_kernel_s_mapped_form_of_an_ipv4_peer_is_its_ipv4_address():
    with socket.socket(socket.AF_INET6) as listener:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::ffff:127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1]), 5):
            sock, address = listener.accept()
            sock.close()
    assert address[0] == "::ffff:127.0.0.1" and client_key(address) == "127.0.0.1"
