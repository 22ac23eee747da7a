"""Helpers shared by the API, error and wire tests against a real broker.

A test module gets one broker for all its tests with ``served =
module_broker(**settings)`` and the ``uri`` fixture (imported from here) runs
each test that takes it once over TCP and once over the Unix socket. Raw
sockets (:class:`RawSocket`) send frames the client would never build.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import struct
import time
import zlib

import pytest

from hostbroker.client.connection import parse_uri
from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import count_entries
from hostbroker.protocol import api
from tests.integration.broker import Broker

SOCKET_KINDS = ("tcp", "unix")
# Far enough ahead that every segment and the log end are "at or before" it.
FAR_FUTURE_MS = 4_000_000_000_000

_topic_numbers = itertools.count()


def new_topic(prefix: str = "t") -> str:
    """A topic name no other test of this run uses."""
    return f"{prefix}-{os.getpid()}-{next(_topic_numbers)}"


def module_broker(**settings):
    """A module-scoped fixture: one broker with ``settings`` for every test of the module."""

    @pytest.fixture(scope="module")
    def served(tmp_path_factory):
        broker = Broker(tmp_path_factory.mktemp("hb"), **settings).start()
        yield broker
        stop_or_kill(broker)

    return served


def stop_or_kill(broker: Broker) -> None:
    if broker.proc is None:
        return
    try:
        broker.stop(timeout=20)
    except Exception:  # noqa: BLE001 - a teardown: leave no process behind
        broker.kill_tree()


@pytest.fixture(params=SOCKET_KINDS)
def uri(request, served) -> str:
    """The module broker's URI, once per socket kind."""
    return getattr(served, request.param)


# Topics and log helpers over the client.


def created_topic(uri_: str, partitions: int = 1, configs=None, prefix: str = "t") -> str:
    """A new topic, created over its own connection; returns its name."""
    topic = new_topic(prefix)
    with SimpleClient(uri_) as client:
        client.create_topic(topic, partitions, configs)
    return topic


def produce_request(topic: str, partition: int, message_set: bytes, acks: int = 1,
                    timeout_ms: int = 5000) -> api.ProduceRequest:
    """A PRODUCE of one message set to one partition."""
    partitions = (api.ProducePartition(topic, partition, message_set),)
    return api.ProduceRequest(acks, timeout_ms, partitions)


def log_end(client: SimpleClient, topic: str, partition: int) -> int:
    return client.offsets(topic, partition, api.LATEST_TIME)[0]


def segment_bases(client: SimpleClient, topic: str, partition: int) -> list[int]:
    """Base offsets of every segment, oldest first (from OFFSETS with a far-future time)."""
    offsets = client.offsets(topic, partition, FAR_FUTURE_MS, max_offsets=1_000_000)
    # Newest first, and the log end (with "now") comes before the segments.
    return sorted(offsets[1:])


def read_log(client: SimpleClient, topic: str, partition: int, offset: int, end: int,
             max_bytes: int = 4096) -> bytes:
    """The log's bytes from ``offset`` to ``end``, fetched whole entry by whole entry."""
    data = bytearray()
    while offset < end:
        fetched = client.fetch(topic, partition, offset, max_bytes)
        _, whole = count_entries(fetched.message_set)
        assert whole > 0, f"no whole entry at {offset} with max_bytes {max_bytes}"
        data += bytes(fetched.message_set[:whole])
        offset += whole
    assert offset == end
    return bytes(data)


# Hand-built entries and frames.


def raw_entry(payload: bytes = b"payload", *, magic: int = 1, attributes: int = 0,
              crc: int | None = None, length: int | None = None) -> bytes:
    """One entry with any field as given, right or wrong (docs/spec/log-format.md)."""
    crc = zlib.crc32(payload) if crc is None else crc
    if magic == 0:
        header = struct.pack(">bI", magic, crc)
    else:
        header = struct.pack(">bBI", magic, attributes, crc)
    if length is None:
        length = len(header) + len(payload)
    return struct.pack(">i", length) + header + payload


def raw_frame(api_key: int, correlation_id: int, body: bytes = b"", *, api_version: int = 0,
              client_id: bytes = b"raw") -> bytes:
    """A request frame with any header values and any body bytes."""
    rest = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id))
    rest += client_id + body
    return struct.pack(">i", len(rest)) + rest


class RawSocket:
    """A plain socket to the broker: whole frames out, whole frames in, nothing checked."""

    def __init__(self, uri: str, timeout: float = 10.0):
        family, address = parse_uri(uri)
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(address)

    def __enter__(self) -> RawSocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return bytes(data)

    def read_frame(self) -> bytes:
        """The next answer frame without its size prefix."""
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def read_response(self, api_key: int) -> tuple[int, api.Response]:
        return api.decode_response(api_key, self.read_frame())

    def assert_closed(self) -> None:
        """The broker closed the connection and sent nothing more."""
        try:
            rest = self.sock.recv(1)
        except ConnectionResetError:
            return
        assert rest == b"", f"expected the connection closed, got {rest!r}"

    def assert_error_frame(self, correlation_id: int, code: ErrorCode) -> None:
        """An error frame (size 6) for ``correlation_id`` with ``code``, then the close."""
        size = self._read_exact(4)
        assert struct.unpack(">i", size) == (api.ERROR_FRAME_SIZE,)
        assert struct.unpack(">ih", self._read_exact(6)) == (correlation_id, code)
        self.assert_closed()


def fetch_frame(topic: str, offset: int, correlation_id: int, max_wait_ms: int = 5000,
                min_bytes: int = 1, max_bytes: int = 1 << 20, partition: int = 0) -> bytes:
    """A FETCH request frame of one partition."""
    return api.encode_request(api.FetchRequest(max_wait_ms, min_bytes, (
        api.FetchPartition(topic, partition, offset, max_bytes),)), correlation_id)


def fetched(sock: RawSocket) -> tuple[int, int, bytes]:
    """(correlation id, error, message set) of the next answer, a one-partition FETCH's."""
    correlation_id, response = sock.read_response(api.ApiKey.FETCH)
    [p] = response.partitions
    return correlation_id, p.error_code, bytes(p.message_set)


def waiting(sock: RawSocket, seconds: float = 0.3) -> bool:
    """Nothing to read on ``sock`` for ``seconds``: a fetch still waits."""
    return not select.select([sock.sock], [], [], seconds)[0]


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):
    """Poll ``predicate`` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
