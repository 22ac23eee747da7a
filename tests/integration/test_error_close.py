"""An error frame reaches a client that pipelined more bytes behind the bad
request (docs/protocol.md, "Error frames" and "Ending a connection").

A close with unread bytes in the broker's receive queue is a TCP reset, which
can destroy the error frame before the client reads it. So the broker sends
the frame, then EOF, and reads and drops what the client still sends (at
most ``connection.linger.ms`` / ``connection.linger.max.bytes``) before it
closes. Here a client pipelines good requests, a bad one, and kilobytes to
megabytes of further requests in one ``sendall``, then reads: every answer
before the bad one, the error frame, then EOF (never a reset), every time.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.protocol import api
from tests.integration.connection_helpers import open_connections
from tests.integration.wire_helpers import RawSocket, module_broker, raw_frame, wait_for

REQUEST_MAX_BYTES = 4096
LINGER_MS = 1000
LINGER_MAX_BYTES = 16 * 1024 * 1024
BAD_CID = 777
KiB = 1024
MiB = 1024 * KiB

served = module_broker(socket_request_max_bytes=REQUEST_MAX_BYTES,
                       connection_linger_ms=LINGER_MS,
                       connection_linger_max_bytes=LINGER_MAX_BYTES)

_EMPTY_TOPICS = struct.pack(">i", 0)


def _metadata(cid: int, client_id: bytes = b"ok") -> bytes:
    return raw_frame(api.ApiKey.METADATA, cid, _EMPTY_TOPICS, client_id=client_id)


def _filler(size: int) -> bytes:
    """Valid METADATA requests of about 3 KiB each, ``size`` bytes or a bit more."""
    frames, total, cid = [], 0, 1000
    while total < size:
        frame = _metadata(cid, b"f" * 3000)
        frames.append(frame)
        total += len(frame)
        cid += 1
    return b"".join(frames)


def _undecodable() -> tuple[bytes, ErrorCode]:
    """A METADATA frame with a byte left over, and the code the broker answers it with."""
    frame = raw_frame(api.ApiKey.METADATA, BAD_CID, _EMPTY_TOPICS + b"\x00")
    with pytest.raises(HostbrokerError) as refused:
        api.decode_request(frame[4:])
    return frame, refused.value.code


def _too_large() -> tuple[bytes, ErrorCode]:
    """A header claiming more than ``socket.request.max.bytes``."""
    head = struct.pack(">ihhi", 10 * REQUEST_MAX_BYTES, api.ApiKey.METADATA, 0, BAD_CID)
    return head + struct.pack(">h", 2) + b"ok", ErrorCode.REQUEST_TOO_LARGE


def _too_short() -> tuple[bytes, None]:
    """A size too small for a correlation id: closed with no answer."""
    return struct.pack(">ihh", 4, api.ApiKey.METADATA, 0), None


BAD = {"undecodable": _undecodable, "too-large": _too_large, "too-short": _too_short}


def _read_to_eof(sock: socket.socket) -> bytes:
    """Everything until EOF; a reset fails the test (that is the bug)."""
    data = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            pytest.fail(f"connection reset after {len(data)} bytes, not closed with EOF")
        if not chunk:
            return bytes(data)
        data += chunk


def _frames(data: bytes) -> list[bytes]:
    frames, at = [], 0
    while at < len(data):
        (size,) = struct.unpack_from(">i", data, at)
        assert at + 4 + size <= len(data), f"an answer cut off at the close ({size} bytes)"
        frames.append(data[at + 4:at + 4 + size])
        at += 4 + size
    return frames


@pytest.fixture(autouse=True)
def no_worker_replaced(served):
    workers = served.workers()
    yield
    assert served.workers() == workers, "a worker died"


def _one_exchange(uri: str, bad: bytes, code: ErrorCode | None, behind: bytes,
                  before_count: int = 3) -> None:
    """``before_count`` good requests, the bad one and ``behind`` in one sendall."""
    before = b"".join(_metadata(cid) for cid in range(1, before_count + 1))
    with RawSocket(uri, timeout=15) as raw:
        sock = raw.sock
        sock.sendall(before + bad + behind)  # completes only if the broker reads it all
        frames = _frames(_read_to_eof(sock))
    answers = frames[:before_count]
    assert [api.decode_response(api.ApiKey.METADATA, f)[0] for f in answers] == \
        list(range(1, before_count + 1))
    if code is None:
        assert len(frames) == before_count, "answers after a close with no answer"
    else:
        assert len(frames) == before_count + 1, \
            f"{len(frames) - before_count - 1} answers after the bad one"
        assert api.is_error_frame(frames[-1])
        assert api.decode_error_frame(frames[-1]) == (BAD_CID, code)


@pytest.mark.parametrize("kind", list(BAD))
@pytest.mark.parametrize("behind_bytes", [256 * KiB, 4 * MiB], ids=["256KiB", "4MiB"])
@pytest.mark.parametrize("before_count", [3, 0], ids=["after-answers", "first"])
def test_the_error_frame_then_eof_reach_a_tcp_client_with_bytes_pipelined_behind(
        served, kind, behind_bytes, before_count):
    bad, code = BAD[kind]()
    behind = _filler(behind_bytes)
    deadline = time.monotonic() + 120
    for _ in range(50):
        _one_exchange(served.tcp, bad, code, behind, before_count)
        assert time.monotonic() < deadline, "50 exchanges took over 120 s"


@pytest.mark.parametrize("kind", list(BAD))
def test_the_same_over_the_unix_socket(served, kind):
    bad, code = BAD[kind]()
    for _ in range(5):
        _one_exchange(served.unix, bad, code, _filler(256 * KiB))


def _error_frame_then_eof(sock: socket.socket, bad: bytes) -> None:
    sock.sendall(bad)
    data = _read_to_eof(sock)
    assert _frames(data) == [api.encode_error_frame(BAD_CID, ErrorCode.REQUEST_TOO_LARGE)[4:]]


def _send_until_refused(sock: socket.socket, chunk: bytes, pause: float, limit: float) -> float:
    """Send ``chunk`` every ``pause`` seconds until the broker has closed (the
    send fails); returns when it failed, or fails the test after ``limit`` s."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic()
        time.sleep(pause)
    pytest.fail(f"still accepting bytes {limit} s after the error frame")


def test_a_client_that_keeps_sending_fast_is_closed_after_the_byte_bound(served):
    bad, _ = _too_large()
    with RawSocket(served.tcp, timeout=15) as raw:
        sock = raw.sock
        _error_frame_then_eof(sock, bad)
        started = time.monotonic()
        closed = _send_until_refused(sock, b"x" * (256 * KiB), 0.0, 30)
    # 16 MiB go far faster than the time bound over loopback
    assert closed - started < LINGER_MS / 1000 + 2


def test_a_client_that_keeps_sending_slowly_is_closed_after_the_time_bound(served):
    bad, _ = _too_large()
    base = open_connections(served)
    with RawSocket(served.tcp, timeout=15) as raw:
        sock = raw.sock
        _error_frame_then_eof(sock, bad)
        started = time.monotonic()
        closed_at = []
        sender = threading.Thread(
            target=lambda: closed_at.append(_send_until_refused(sock, b"y" * 1024, 0.02, 30)))
        sender.start()
        # lingering, it still counts against max.connections
        assert wait_for(lambda: open_connections(served) > base, timeout=0.5)
        sender.join(40)
    assert closed_at, "the sender did not finish"
    took = closed_at[0] - started
    assert LINGER_MS / 1000 * 0.8 < took < LINGER_MS / 1000 + 3, took
    assert wait_for(lambda: open_connections(served) == base, timeout=5)


def test_a_client_that_closes_after_the_error_frame_is_closed_at_once(served):
    bad, _ = _too_large()
    base = open_connections(served)
    with RawSocket(served.tcp, timeout=15) as raw:
        sock = raw.sock
        _error_frame_then_eof(sock, bad)
    started = time.monotonic()
    assert wait_for(lambda: open_connections(served) == base, timeout=5, interval=0.01)
    assert time.monotonic() - started < LINGER_MS / 1000 * 0.8
