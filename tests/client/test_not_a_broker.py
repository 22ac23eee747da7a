"""A client pointed at something that is not a broker says so quickly, in one line, and
never reads the length such a peer's bytes spell (an HTTP answer reads as 1.2 GB)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest

from hostbroker.client import BrokerConnection, SimpleConsumer
from hostbroker.client.connection import NotABrokerError
from hostbroker.protocol.api import FetchPartition, FetchRequest, MetadataRequest


class Peer:
    """A TCP server on a real socket that answers every connection with ``reply(data)``
    once it has read something (None: read and never answer)."""

    def __init__(self, reply):
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.uri = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        held = []
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            conn.settimeout(5)
            try:
                data = conn.recv(65536)
                if self.reply is not None and data:
                    conn.sendall(self.reply(data))
            except OSError:
                pass
        for conn in held:
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join()
        self.listener.close()


@pytest.fixture
def peer():
    made = []

    def make(reply):
        made.append(Peer(reply))
        return made[-1]

    yield make
    for p in made:
        p.close()


HTTP = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def test_an_http_server_is_refused_at_once_without_reading_its_size(peer):
    server = peer(lambda data: HTTP)
    tracemalloc.start()
    try:
        started = time.monotonic()
        with pytest.raises(NotABrokerError, match="is not a hostbroker broker") as caught:
            BrokerConnection(server.uri).connect().request(MetadataRequest())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 2
    assert "a size of 1213486160 bytes" in str(caught.value)
    assert peak < 1 << 20  # nothing the size of what b"HTTP" spells was allocated


def test_a_plausible_size_with_a_wrong_correlation_id_is_refused_before_the_body(peer):
    # 100 MB claimed, under the connection's limit: the correlation id gives it away.
    server = peer(lambda data: (100_000_000).to_bytes(4, "big") + b"\x12\x34\x56\x78garbage")
    tracemalloc.start()
    try:
        with pytest.raises(NotABrokerError, match="correlation id 305419896, expected 0"):
            BrokerConnection(server.uri).connect().request(MetadataRequest())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_fetch_answer_is_bounded_by_what_the_fetch_asked(peer):
    # A well-formed start (the right correlation id) but a size no 1 KiB fetch can bring.
    server = peer(lambda data: (50_000_000).to_bytes(4, "big") + data[8:12])
    connection = BrokerConnection(server.uri).connect()
    with pytest.raises(NotABrokerError, match="a size of 50000000 bytes"):
        connection.request(FetchRequest(0, 0, (FetchPartition("t", 0, 0, 1024),)))


def test_a_peer_that_never_answers_fails_within_the_setup_timeout(peer):
    server = peer(None)
    connection = BrokerConnection(server.uri, timeout=30, setup_timeout=0.5).connect()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"no answer from {server.uri} within 0.5 s"):
        connection.request(MetadataRequest())
    assert time.monotonic() - started < 3
    with SimpleConsumer(server.uri, socket_connection_setup_timeout_ms=300) as consumer:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            consumer.metadata()
        assert time.monotonic() - started < 3


def test_a_connect_nobody_accepts_fails_within_the_setup_timeout():
    # A listener whose backlog is full: the kernel drops the handshake, the
    # connect waits.
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    uri = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    held = []
    try:
        for _ in range(3):  # fill the backlog
            try:
                held.append(socket.create_connection(listener.getsockname(), timeout=0.3))
            except TimeoutError:
                break
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=f"connecting to {uri}: no answer within 0.5 s"):
            BrokerConnection(uri, timeout=30, setup_timeout=0.5).connect()
        assert time.monotonic() - started < 3
    finally:
        for sock in held:
            sock.close()
        listener.close()


def consume_from(uri: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "hostbroker", "consume", "--bootstrap", uri,
                             "--topic", "t", *extra], capture_output=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    return result, time.monotonic() - started


def test_consume_pointed_at_an_http_server_or_a_silent_peer_says_so_in_one_line(peer):
    http = peer(lambda data: HTTP)
    result, took = consume_from(http.uri)
    assert result.returncode == 1
    err = result.stderr.decode()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"hostbroker consume: {http.uri} is not a hostbroker broker")
    assert took < 10

    silent = peer(None)
    result, took = consume_from(silent.uri, "--property", "socket.connection.setup.timeout.ms=500")
    assert result.returncode == 1
    assert result.stderr.decode().count("\n") == 1, result.stderr
    assert took < 10

    garbage = peer(lambda data: b"\x00\x00\x00\x08" + b"\xff" * 8)
    result, _ = consume_from(garbage.uri, "--group", "g")
    assert result.returncode == 1
    assert "is not a hostbroker broker" in result.stderr.decode()
    assert result.stderr.decode().count("\n") == 1, result.stderr
