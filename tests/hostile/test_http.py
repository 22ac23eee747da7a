"""Hostile HTTP clients against a real broker's listener (hb-http): slow
senders, oversized heads and bodies, more connections than allowed,
pipelining, HTTP/1.0, malformed and non-ASCII requests, paths that try to
climb out, a client that never reads its answers, and the admin gate's
refusals. After each: hb-http was not replaced, the Kafka listener answers,
and a normal HTTP request is answered promptly."""

from __future__ import annotations

import json
import socket
import time

import psutil
import pytest

from tests.http.support import (closed_within, connect, http_broker, read_answer, request,
                                wait_http)
from tests.integration.wire_helpers import stop_or_kill

TIMEOUT_MS = 1000  # http.request.timeout.ms
IDLE_MS = 2000  # http.idle.timeout.ms
MAX_CONNECTIONS = 8
MAX_REQUEST = 4096
TOKEN = "hostile-admin-token-0123456789"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("http-hostile")
    token = root / "admin.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    broker = http_broker(root, **{
        "http.request.timeout.ms": TIMEOUT_MS, "http.idle.timeout.ms": IDLE_MS,
        "http.max.connections": MAX_CONNECTIONS, "http.request.max.bytes": MAX_REQUEST,
        "http.admin.enable": "true", "http.admin.token.file": str(token)})
    yield broker
    stop_or_kill(broker)


@pytest.fixture
def port(served):
    pid = served.workers()["hb-http"]
    yield served.http_port
    assert served.workers().get("hb-http") == pid, "hb-http was replaced"
    wait_http(served.http_port, timeout=IDLE_MS / 1000 + 5)
    start = time.monotonic()
    assert request(served.http_port, "GET", "/nope").status == 404
    assert time.monotonic() - start < 2.0
    with served.client() as client:
        client.metadata()


def one_answer_then_closed(sock: socket.socket, seconds: float = 5.0):
    raw = closed_within(sock, seconds)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, head.decode("latin-1"), body


def test_a_slow_sender_is_cut_off_at_the_request_timeout(port):
    with connect(port) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /nope HTTP/1.1\r\n")
        try:
            while time.monotonic() - start < TIMEOUT_MS / 1000 * 3:
                sock.sendall(b"X-Slow: 1\r\n")  # a header line now and then
                time.sleep(0.1)
        except OSError:  # closed under our feet: that is the point
            pass
        status, head, _ = one_answer_then_closed(sock)
        assert status == 408 and "Connection: close" in head
        assert time.monotonic() - start < TIMEOUT_MS / 1000 * 3 + 1


def test_slow_senders_on_every_connection_do_not_stop_the_listener_for_long(port):
    socks = [connect(port) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in socks:
            sock.sendall(b"GET /nope HTTP/1.1\r\nHost: localhost\r\n")
        time.sleep(0.2)
        with connect(port) as extra:  # one too many: 503 and closed at once
            extra.sendall(b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
            status, _, body = one_answer_then_closed(extra, 2.0)
            assert status == 503 and b"http.max.connections" in body
        for sock in socks:  # each is cut off by the request timeout
            assert one_answer_then_closed(sock, TIMEOUT_MS / 1000 + 3)[0] == 408
    finally:
        for sock in socks:
            sock.close()


def test_too_many_idle_connections_are_refused_and_the_rest_served(port):
    socks = [connect(port) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)
        for _ in range(3):
            with connect(port) as extra:
                assert one_answer_then_closed(extra, 2.0)[0] == 503
        buf = bytearray()
        socks[0].sendall(b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert read_answer(socks[0], buf).status == 404
    finally:
        for sock in socks:
            sock.close()


def test_oversized_headers_are_431_and_the_connection_closed(port):
    with connect(port) as sock:
        try:
            sock.sendall(b"GET /nope HTTP/1.1\r\nHost: localhost\r\nX-Big: "
                         + b"a" * (MAX_REQUEST * 4))
        except OSError:
            pass
        status, _, body = one_answer_then_closed(sock)
        assert status == 431 and b"http.request.max.bytes" in body


def test_an_oversized_body_is_413_before_it_is_read(port):
    with connect(port) as sock:
        sock.sendall(b"POST /api/topics HTTP/1.1\r\nHost: localhost\r\n"
                     b"Content-Length: 1000000000\r\n\r\n")
        status, _, body = one_answer_then_closed(sock)
        assert status == 413 and b"http.request.max.bytes" in body


def test_pipelined_requests_are_answered_in_order(port):
    paths = [b"/nope", b"/a/../b", b"/nope", b"/x/%2e%2e/y"] * 10
    with connect(port) as sock:
        sock.sendall(b"".join(b"GET " + p + b" HTTP/1.1\r\nHost: localhost\r\n\r\n" for p in paths))
        buf = bytearray()
        statuses = [read_answer(sock, buf).status for _ in paths]
    assert statuses == [404, 400, 404, 400] * 10


def test_http_1_0_is_answered_then_closed(port):
    with connect(port) as sock:
        sock.sendall(b"GET /nope HTTP/1.0\r\nHost: localhost\r\n\r\nGET /nope HTTP/1.0\r\n\r\n")
        status, head, body = one_answer_then_closed(sock)
        assert status == 404 and head.startswith("HTTP/1.1 404")
        assert b"HTTP/1.1" not in body  # the second request was not answered


@pytest.mark.parametrize("raw, status", [
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64 + b"\r\n\r\n", 400),  # TLS
    (b"GET\r\n\r\n", 400),
    (b"GET / HTTP/1.1 junk\r\nHost: localhost\r\n\r\n", 400),
    (b"get / HTTP/9.9\r\nHost: localhost\r\n\r\n", 505),
    (b"GET / HTTP/1.1\r\nHost: localhost\r\nBad Header: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    (b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\n", 400),
    (b"GET /\xe2\x80\xa8 HTTP/1.1\r\nHost: localhost\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: localhost\r\nX: \xff\xfe\r\n\r\n", 400),
    (b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: localhost\r\n\r\n", 400),
    (b"\x00\x00\x00\x10\x00\x03\x00\x00" + b"\r\n\r\n", 400),  # a Kafka frame
])
def test_a_malformed_or_non_ascii_request_is_one_line_and_closed(port, raw, status):
    with connect(port) as sock:
        sock.sendall(raw)
        got, head, body = one_answer_then_closed(sock)
        assert got == status, (head, body)
        error = json.loads(body)["error"]
        assert error and "\n" not in error


@pytest.mark.parametrize("path", [
    "/../etc/passwd", "/../../../../etc/passwd", "/static/../../../etc/passwd",
    "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/static/..%2f..%2f..%2fetc%2fpasswd",
    "/static/%252e%252e/etc/passwd", "/static/....//....//etc/passwd",
    "/static/..\\..\\etc\\passwd", "/static//etc/passwd", "/static/%00../etc/passwd",
])
def test_no_path_reaches_the_file_system(port, path):
    answer = request(port, "GET", path)
    assert answer.status in (400, 404), answer
    assert b"root:" not in answer.body
    assert answer.headers["content-type"] == "application/json"


def test_a_client_that_never_reads_holds_bounded_memory_and_is_closed(port, served):
    http = psutil.Process(served.workers()["hb-http"])
    rss = http.memory_info().rss
    requests = b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n" * 1000
    sock = connect(port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    pushed = 0
    # push for less than the idle timeout: past it the listener closes us (a reset,
    # as what we sent is unread), which is the end of the case, not a failure
    deadline = time.monotonic() + IDLE_MS / 1000 * 0.6
    try:
        while time.monotonic() < deadline and pushed < 64 * 1024 * 1024:
            try:
                pushed += sock.send(requests)
            except BlockingIOError:
                time.sleep(0.05)  # the listener stopped reading us
        # whatever was pushed, nearly all of it waits in socket buffers, not in hb-http
        assert pushed < 32 * 1024 * 1024, pushed
        assert http.memory_info().rss - rss < 16 * 1024 * 1024
        # and the others are served meanwhile
        assert request(port, "GET", "/nope").status == 404
    finally:
        sock.close()
    # A client that asked and reads nothing is closed once nothing moves for the idle
    # timeout. (The one above may have left more requests in the socket buffers than
    # hb-http answers in seconds, one a round, on a busy machine: this one asks 200, more
    # answers than its receive buffer takes, and then only probes for the reset with empty
    # lines, which ask nothing and are no progress.)
    sock = connect(port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.sendall(requests[:len(requests) // 5])
        began = time.monotonic()
        sock.setblocking(False)
        with pytest.raises(OSError):  # reset: it closed with our requests unread
            while time.monotonic() - began < IDLE_MS / 1000 + 20:
                try:
                    sock.send(b"\r\n")
                except BlockingIOError:
                    pass
                time.sleep(0.05)
        assert time.monotonic() - began > IDLE_MS / 1000 * 0.9  # not before the timeout
    finally:
        sock.close()


def admin_post(port: int, path: str = "/api/topics", body: bytes = b'{"topic": "x"}',
               **headers) -> tuple[int, str]:
    base = {"Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json",
            "X-Hostbroker-Console": "1", "Authorization": f"Bearer {TOKEN}"}
    for name, value in headers.items():
        name = name.replace("_", "-")
        if value is None:
            base.pop(name, None)
        else:
            base[name] = value
    answer = request(port, "POST", path, body, base)
    return answer.status, answer.json().get("error", "") if answer.body else ""


@pytest.mark.parametrize("changes, status, words", [
    ({"Authorization": None}, 401, "admin token"),
    ({"Authorization": "Bearer wrong-token-0123456789ab"}, 401, "admin token"),
    ({"Authorization": "Bearer " + TOKEN[:-1]}, 401, "admin token"),
    ({"Authorization": "Basic " + TOKEN}, 401, "admin token"),
    ({"Origin": "http://evil.example"}, 403, "Origin"),
    ({"Origin": "null"}, 403, "Origin"),
    ({"Origin": None}, 403, "Origin or Referer"),
    ({"Origin": None, "Referer": "http://evil.example/"}, 403, "Referer"),
    ({"Content_Type": "text/plain"}, 403, "application/json"),
    ({"Content_Type": "application/x-www-form-urlencoded"}, 403, "application/json"),
    ({"X_Hostbroker_Console": None}, 403, "X-Hostbroker-Console"),
])
def test_the_admin_gate_refuses_what_is_not_the_console_with_its_token(port, served, changes,
                                                                        status, words):
    topics_before = _topics(served)
    got, error = admin_post(port, "/api/topics", b'{"topic": "gate-should-not-make-this", '
                                        b'"partitions": 1}', **changes)
    assert (got, words in error) == (status, True), error
    assert _topics(served) == topics_before


def _topics(served) -> set[str]:
    with served.client() as client:
        return {t.topic for t in client.metadata().topics}


def test_the_console_s_own_request_with_the_token_passes_the_gate(port, served):
    status, error = admin_post(port, "/api/topics", b'{"topic": "gate-lets-this-through", '
                                                    b'"partitions": 2}')
    assert status == 201, error
    with served.client() as client:  # made, as the wire says
        (topic,) = client.metadata(["gate-lets-this-through"]).topics
    assert sorted(p.partition for p in topic.partitions) == [0, 1]
