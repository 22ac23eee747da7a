"""Clients that ask for big answers and never read them, against a real
broker's hb-http: scrapes of ``/metrics`` less than a second apart share one
body (hb-http's memory grows by about one body, not one per connection), and
the answers held for all connections together are bounded by
``http.output.max.bytes``: past it a new request is answered 503 with
``Retry-After``, and once the answers drain requests are served again."""

from __future__ import annotations

import socket
import time

import psutil
import pytest

from tests.http.support import connect, http_broker, read_answer, request
from tests.integration.wire_helpers import stop_or_kill

SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
OUTPUT_MAX = 16 * 1024 * 1024  # http.output.max.bytes of the test broker


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = http_broker(tmp_path_factory.mktemp("http-output"), **{
        "max.partitions": 12000, "http.max.connections": 64,
        "http.max.connections.per.client": 64, "http.output.max.bytes": OUTPUT_MAX,
        "http.idle.timeout.ms": 60000})
    try:
        # 10,000 partitions: a scrape's body (~7 MB) is larger than what the
        # kernel's send buffer takes of it, so the rest stays with hb-http
        with broker.client(timeout=120) as client:
            client.metadata()
            for i in range(10):
                client.create_topic(f"wide-{i}", 1000)
        yield broker
    finally:
        stop_or_kill(broker)


def unread_scrapes(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that each ask for /metrics and read nothing (a small
    receive buffer, so the answer stays with hb-http)."""
    socks = []
    for _ in range(n):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", port))
        sock.sendall(SCRAPE)
        socks.append(sock)
    return socks


def body_size(port: int) -> int:
    answer = request(port, "GET", "/metrics")
    assert answer.status == 200
    return len(answer.body)


def test_unread_scrapes_at_once_hold_about_one_body(served):
    port = served.http_port
    size = body_size(port)
    assert size > 5_000_000, size  # more than a socket's send buffer takes
    http = psutil.Process(served.workers()["hb-http"])
    time.sleep(1.1)  # the next scrape renders afresh
    before = http.memory_info().rss
    socks = unread_scrapes(port, 30)
    try:
        time.sleep(2)
        grown = http.memory_info().rss - before
        # 30 unread answers, each its own body, would be 30 bodies; together
        # they are about one (a rendering's transient memory aside)
        assert grown < 8 * size, (grown, size)
        # and each is a whole, good answer once read
        socks[-1].setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        answer = read_answer(socks[-1])
        assert answer.status == 200 and abs(len(answer.body) - size) < size // 100
        assert answer.body.endswith(b"\n") and b"hostbroker_metrics_scrape_seconds " in answer.body
    finally:
        for sock in socks:
            sock.close()


def test_answers_owed_past_the_bound_are_503_until_they_drain(served):
    port = served.http_port
    size = body_size(port)
    held = []
    try:
        # bodies rendered a second apart are distinct: past the bound soon
        for _ in range(OUTPUT_MAX // size + 2):
            time.sleep(1.1)
            held += unread_scrapes(port, 1)
        time.sleep(0.5)
        answer = request(port, "GET", "/nope")
        assert answer.status == 503, answer
        assert "http.output.max.bytes" in answer.json()["error"]
        assert answer.headers.get("retry-after") == "1"
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while request(port, "GET", "/nope").status != 404:  # the closed ones drained
        assert time.monotonic() < deadline, "requests still refused after the answers drained"
        time.sleep(0.2)
