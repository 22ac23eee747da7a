"""Hostile framing over real sockets (TCP and Unix): garbage streams, sizes
that lie, stalled and unread connections, the order of an acks=0 error, and
the connection limit (issue 7, items 6 to 9)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.hostile import fuzzlib
from tests.hostile.fuzzlib import Violation, batch_rng
from tests.hostile.invariants import Tree, prompt_client
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, stop_or_kill

KINDS = ("unix", "tcp")
CLOSE_SECONDS = 5.0


def closed_within(sock: socket.socket, seconds: float) -> bytes:
    """Everything the broker sent before closing; Violation if it did not close in time."""
    deadline = time.monotonic() + seconds
    data = bytearray()
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(data)
        except socket.timeout:
            break
        if not chunk:
            return bytes(data)
        data += chunk
    raise Violation(f"the connection was not closed within {seconds}s ({len(data)} bytes came)")


@pytest.mark.parametrize("kind", KINDS)
def test_random_byte_streams_then_eof_are_closed_promptly(session, kind, seed):
    uri = getattr(session.broker, kind)
    for case in range(60):
        rng = batch_rng(seed, 2_000_000 + case)
        stream = rng.randbytes(rng.choice([1, 3, 4, 9, 14, 100, 4096]))
        with fuzzlib.connect(uri) as sock:
            sock.sendall(stream)
            sock.shutdown(socket.SHUT_WR)
            try:
                closed_within(sock, CLOSE_SECONDS)
            except Violation as exc:
                raise Violation(f"seed {seed} case {case} ({stream[:16].hex()}...): {exc}") from None


SIZES = [-1, -(2**31), 0, 1, 2, 7, 8, 9, 2**31 - 1, 104_857_601]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", SIZES)
def test_a_lying_size_prefix_is_refused(session, kind, size):
    """Negative, too short for a header, or over socket.request.max.bytes: refused at once."""
    header = struct.pack(">hhih", api.ApiKey.METADATA, 0, 77, 0)
    body = header[:max(0, min(size, len(header)))] if size >= 0 else header
    with fuzzlib.connect(getattr(session.broker, kind)) as sock:
        sock.sendall(struct.pack(">i", size) + body)
        data = closed_within(sock, CLOSE_SECONDS)
    if size > 104_857_600:
        assert data == api.encode_error_frame(77, ErrorCode.REQUEST_TOO_LARGE)
    elif size >= 8:  # a correlation id, then a truncated client id
        assert data == api.encode_error_frame(77, ErrorCode.INVALID_REQUEST)
    elif size >= 0:  # no correlation id: nobody to answer
        assert data == b""
    else:
        assert data in (b"", api.encode_error_frame(77, ErrorCode.INVALID_REQUEST))


def stall(uri: str, claimed: int) -> socket.socket:
    """A connection that sent a 14-byte start of a ``claimed``-byte frame and then nothing."""
    sock = fuzzlib.connect(uri)
    sock.sendall(struct.pack(">ihhih", claimed, api.ApiKey.PRODUCE, 0, 5, 0))
    return sock


def test_stalled_frames_pin_no_memory(session):
    """Eight connections each claiming a 100 MiB frame cost no 100 MiB each (item 6)."""
    socks = [stall(session.uris[i % 2], 100 * 2**20) for i in range(8)]
    try:
        time.sleep(1.0)
        session.tree.check(settle=2.0)
        prompt_client(session.uris, session.witness, b"during-stall")
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def idle_broker(tmp_path):
    broker = Broker(tmp_path, connections_max_idle_ms=1500,
                    socket_request_read_timeout_ms=1500)
    broker.start()
    yield broker
    stop_or_kill(broker)


def test_stalled_and_idle_connections_are_closed(idle_broker):
    """A frame that stops mid-way and a connection that sends nothing both close (item 6)."""
    started = time.monotonic()
    stalled = [stall(idle_broker.unix, 100 * 2**20), stall(idle_broker.tcp, 1000)]
    idle = [fuzzlib.connect(idle_broker.unix), fuzzlib.connect(idle_broker.tcp)]
    for sock in stalled + idle:
        closed_within(sock, 1.5 + CLOSE_SECONDS - (time.monotonic() - started))
        sock.close()


def pipeline_without_reading(uri: str, request: bytes, count: int, seconds: float) -> threading.Thread:
    sock = fuzzlib.connect(uri)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    def send() -> None:
        deadline = time.monotonic() + seconds
        try:
            for _ in range(count):
                if time.monotonic() > deadline:
                    break
                sock.settimeout(max(deadline - time.monotonic(), 0.01))
                sock.sendall(request)
        except OSError:
            pass
        finally:
            sock.close()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_client_that_never_reads_grows_nothing_and_delays_nobody(session):
    """20,000 pipelined wide METADATA requests, answers never read (item 7)."""
    request = api.encode_request(api.MetadataRequest(()), 1, "unread")
    threads = [pipeline_without_reading(uri, request, 20_000, 6.0) for uri in session.uris]
    try:
        time.sleep(1.0)
        for _ in range(3):
            session.tree.check()
            prompt_client(session.uris, session.witness, b"while-unread")
            time.sleep(0.5)
    finally:
        for t in threads:
            t.join(10)


def undecodable_acks0_produce(correlation_id: int) -> bytes:
    """An acks=0 PRODUCE whose message set claims 100 bytes and has 7: it cannot be decoded."""
    frame = api.encode_request(api.ProduceRequest(0, 1000, (api.ProducePartition(
        "fz-data-0", 0, b"garbage"),)), correlation_id, "acks0")
    body = bytearray(frame[4:])
    struct.pack_into(">i", body, len(body) - 11, 100)
    return struct.pack(">i", len(body)) + bytes(body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_malformed_acks0_produce_answers_in_order_then_closes(session, kind):
    """METADATA, bad acks=0 PRODUCE, METADATA: answer, error frame, close (item 8)."""
    uri = getattr(session.broker, kind)
    bad = undecodable_acks0_produce(2)
    meta = lambda cid: api.encode_request(api.MetadataRequest(()), cid, "acks0")  # noqa: E731
    with RawSocket(uri, timeout=CLOSE_SECONDS) as raw:
        raw.send(meta(1) + bad + meta(3))
        assert raw.read_response(api.ApiKey.METADATA)[0] == 1
        raw.assert_error_frame(2, ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize("kind", KINDS)
def test_a_malformed_acks0_produce_waits_for_the_long_poll_before_it(session, kind):
    uri = getattr(session.broker, kind)
    with session.broker.client() as client:
        end = client.offsets("fz-data-1", 0)[0]
    poll = api.encode_request(api.FetchRequest(500, 1 << 20, (api.FetchPartition(
        "fz-data-1", 0, end, 1 << 20),)), 1, "acks0")
    bad = undecodable_acks0_produce(2)
    with RawSocket(uri, timeout=CLOSE_SECONDS) as raw:
        raw.send(poll + bad)
        assert raw.read_response(api.ApiKey.FETCH)[0] == 1
        raw.assert_error_frame(2, ErrorCode.INVALID_REQUEST)


@pytest.fixture
def limited_broker(tmp_path):
    broker = Broker(tmp_path, max_connections=20)
    broker.start()
    yield broker
    stop_or_kill(broker)


def test_max_connections_is_exact(limited_broker):
    """40 connections at a limit of 20: exactly 20 are served (item 9)."""
    time.sleep(0.5)  # the start-up probes' connections are gone
    tree = Tree(limited_broker.proc.pid)
    request = api.encode_request(api.MetadataRequest(()), 9, "many")
    socks = []
    try:
        for i in range(40):
            socks.append(fuzzlib.connect((limited_broker.unix, limited_broker.tcp)[i % 2]))
        served = 0
        for sock in socks:
            try:
                sock.sendall(request)
                sock.settimeout(CLOSE_SECONDS)
                served += len(sock.recv(8)) == 8
            except OSError:
                pass
        assert served == 20
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while True:  # and the slots come back, once the acceptor has seen the closes
        try:
            with limited_broker.client() as client:
                client.metadata()
                client.produce("after", 0, encode_message_set([b"x"]))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    tree.check()
