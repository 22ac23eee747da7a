"""Framing on the real sockets: error frames, closes, limits (docs/spec/protocol.md, "Framing").

Frames the client would never build go out on raw sockets. The shared broker
takes requests of at most 4096 bytes (``socket.request.max.bytes``).
"""

from __future__ import annotations

import os
import signal
import stat
import struct

import pytest

from hostbroker.client.connection import BrokerConnection
from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.connection_helpers import open_connections
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    RawSocket,
    created_topic,
    log_end,
    module_broker,
    produce_request,
    raw_frame,
    uri,
    wait_for,
)

REQUEST_MAX_BYTES = 4096

served = module_broker(socket_request_max_bytes=REQUEST_MAX_BYTES)


def _produce_frame(topic: str, correlation_id: int, frame_size: int) -> bytes:
    """A valid PRODUCE (acks 1) frame whose size field is exactly ``frame_size``."""

    def frame(payload_bytes: int) -> bytes:
        request = produce_request(topic, 0, encode_message_set([b"p" * payload_bytes]))
        return api.encode_request(request, correlation_id, "wire")

    overhead = len(frame(0)) - 4
    return frame(frame_size - overhead)


def _with_body(request: api.Request, correlation_id: int, edit) -> bytes:
    """``request``'s frame with its body bytes changed by ``edit`` and the size fixed."""
    body = api.encode_request(request, correlation_id, "raw")[4:]
    body = edit(body)
    return struct.pack(">i", len(body)) + body


# REQUEST_TOO_LARGE


def test_a_request_at_the_limit_is_served(uri):
    topic = created_topic(uri)
    frame = _produce_frame(topic, 5, REQUEST_MAX_BYTES)
    assert struct.unpack(">i", frame[:4]) == (REQUEST_MAX_BYTES,)
    with RawSocket(uri) as raw:
        raw.send(frame)
        correlation_id, response = raw.read_response(api.ApiKey.PRODUCE)
    assert correlation_id == 5
    assert response.partitions[0].error_code == ErrorCode.NONE


@pytest.mark.parametrize("size", [REQUEST_MAX_BYTES + 1, 10 * REQUEST_MAX_BYTES, 2**31 - 1])
def test_a_request_over_the_limit_gets_request_too_large(uri, size):
    topic = created_topic(uri)
    with SimpleClient(uri) as c:
        before = log_end(c, topic, 0)
        frame = _produce_frame(topic, 31337, REQUEST_MAX_BYTES + 1)
        # The size says it all: send it with the header and a bit of the body only.
        head = struct.pack(">i", size) + frame[4:64]
        with RawSocket(uri) as raw:
            raw.send(head)
            raw.assert_error_frame(31337, ErrorCode.REQUEST_TOO_LARGE)
        assert log_end(c, topic, 0) == before


def test_request_too_large_after_pipelined_requests(uri):
    with RawSocket(uri) as raw:
        raw.send(api.encode_request(api.MetadataRequest(()), 1)
                 + api.encode_request(api.MetadataRequest(()), 2)
                 + struct.pack(">ihhi", REQUEST_MAX_BYTES + 100, 3, 0, 3) + b"\0\0")
        assert [raw.read_response(api.ApiKey.METADATA)[0] for _ in range(2)] == [1, 2]
        raw.assert_error_frame(3, ErrorCode.REQUEST_TOO_LARGE)


# UNSUPPORTED_VERSION


@pytest.mark.parametrize("api_key,api_version", [
    (99, 0), (28, 0), (-1, 0), (32767, 0),
    (8, 1), (9, 1), (10, 1), (11, 1), (12, 1), (13, 1),  # the group APIs are version 0 only
    (14, 2), (15, 1), (16, 1), (17, 1), (18, 1),  # replication's new APIs too (LEADER_AND_ISR: 0 and 1)
    (19, 1), (20, 1), (21, 1),  # and changing topics
    (22, 1), (23, 1), (24, 1), (25, 1), (26, 1),  # and access control
    (api.ApiKey.PRODUCE, 2), (api.ApiKey.METADATA, 3), (api.ApiKey.FETCH, 3),
    (api.ApiKey.CREATE_TOPIC, 2),
    (api.ApiKey.FETCH, -1),
    (api.ApiKey.OFFSET_FETCH, 7), (api.ApiKey.OFFSET_COMMIT, 2),
])
def test_unknown_api_or_version_gets_unsupported_version(uri, api_key, api_version):
    body = struct.pack(">i", 0)  # an empty list: a valid METADATA body
    with RawSocket(uri) as raw:
        raw.send(raw_frame(api_key, 4242, body, api_version=api_version))
        raw.assert_error_frame(4242, ErrorCode.UNSUPPORTED_VERSION)


# INVALID_REQUEST


def _metadata(*topics: str) -> api.MetadataRequest:
    return api.MetadataRequest(tuple(topics))


MALFORMED = {
    "a byte left over": (_metadata("a"), lambda b: b + b"\0"),
    "many bytes left over": (_metadata(), lambda b: b + b"trailing garbage"),
    "count past the frame": (_metadata("a"), lambda b: b[:-7] + struct.pack(">i", 3) + b[-3:]),
    "count that cannot fit": (_metadata(), lambda b: b[:-4] + struct.pack(">i", 2**31 - 1)),
    "string past the frame": (
        _metadata("abc"), lambda b: b[:-5] + struct.pack(">h", 200) + b[-3:]),
    "body cut short": (api.OffsetsRequest("t", 0, -1, 1), lambda b: b[:-3]),
    "no body": (api.FetchRequest(0, 0, ()), lambda b: b[:-12]),
    "client id past the frame": (_metadata(), lambda b: b[:8] + struct.pack(">h", 30) + b"ab"),
    "produce set past the frame": (
        produce_request("t", 0, b"x" * 20),
        lambda b: b[:-10]),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_body_gets_invalid_request(uri, name):
    request, edit = MALFORMED[name]
    with RawSocket(uri) as raw:
        raw.send(_with_body(request, 777, edit))
        raw.assert_error_frame(777, ErrorCode.INVALID_REQUEST)


@pytest.mark.parametrize("size", [0, 1, 4, 6, 7, -1, -8, -2**31])
def test_frame_too_short_for_a_correlation_id_is_closed_without_answer(uri, size):
    frame = struct.pack(">i", size) + struct.pack(">hhi", 3, 0, 99)[:size]
    with RawSocket(uri) as raw:
        raw.send(frame + api.encode_request(api.MetadataRequest(()), 100))
        raw.assert_closed()


def test_answers_before_an_error_frame_still_arrive(uri):
    topic = created_topic(uri)
    data = encode_message_set([b"before the bad frame"])
    with RawSocket(uri) as raw:
        raw.send(api.encode_request(api.MetadataRequest((topic,)), 10)
                 + api.encode_request(produce_request(topic, 0, data), 11)
                 + api.encode_request(api.OffsetsRequest(topic, 0, api.EARLIEST_TIME, 1), 12)
                 + raw_frame(99, 13)
                 + api.encode_request(api.MetadataRequest(()), 14))
        assert raw.read_response(api.ApiKey.METADATA)[0] == 10
        correlation_id, produced = raw.read_response(api.ApiKey.PRODUCE)
        assert (correlation_id, produced.partitions[0].log_end_offset) == (11, len(data))
        assert raw.read_response(api.ApiKey.OFFSETS) == (12, api.OffsetsResponse(0, (0,)))
        raw.assert_error_frame(13, ErrorCode.UNSUPPORTED_VERSION)


@pytest.mark.parametrize("bad_frame,code", [
    (raw_frame(99, 13), ErrorCode.UNSUPPORTED_VERSION),
    (raw_frame(api.ApiKey.METADATA, 13, struct.pack(">i", 0) + b"left over"),
     ErrorCode.INVALID_REQUEST),
], ids=["unknown api_key", "bytes left over"])
def test_nothing_after_an_error_frame_runs(uri, bad_frame, code):
    # The broker closes the connection after the error frame, so a request
    # behind the bad one can never be answered: it must not be carried out either.
    topic = created_topic(uri)
    late = produce_request(topic, 0, encode_message_set([b"late"]))
    with RawSocket(uri) as raw:
        raw.send(bad_frame + api.encode_request(late, 14))
        raw.assert_error_frame(13, code)
    with SimpleClient(uri) as c:
        assert log_end(c, topic, 0) == 0
        assert c.metadata([topic]).topics[0].partitions[0].log_end_offset == 0


# A PRODUCE with acks=0 holds a place in the order like any request: it gives it
# back without an answer, or takes it with its error frame.


def _bad_acks_zero_produce(topic: str, correlation_id: int) -> bytes:
    request = produce_request(topic, 0, encode_message_set([b"never appended"]), acks=0)
    return _with_body(request, correlation_id, lambda b: b[:-10])


def test_a_malformed_acks_zero_produce_gets_its_error_frame_in_order(uri):
    topic = created_topic(uri)
    with RawSocket(uri) as raw:
        raw.send(api.encode_request(api.MetadataRequest(()), 1)
                 + _bad_acks_zero_produce(topic, 2)
                 + api.encode_request(api.MetadataRequest(()), 3))
        assert raw.read_response(api.ApiKey.METADATA)[0] == 1
        raw.assert_error_frame(2, ErrorCode.INVALID_REQUEST)


def test_a_malformed_acks_zero_produce_waits_for_a_long_poll_before_it(uri):
    topic = created_topic(uri)
    fetch = api.FetchRequest(1500, 1, (api.FetchPartition(topic, 0, 0, 1024),))
    with RawSocket(uri) as raw:
        raw.send(api.encode_request(fetch, 1) + _bad_acks_zero_produce(topic, 2)
                 + api.encode_request(api.MetadataRequest(()), 3))
        correlation_id, fetched = raw.read_response(api.ApiKey.FETCH)
        assert correlation_id == 1
        assert fetched.partitions[0].error_code == ErrorCode.NONE
        raw.assert_error_frame(2, ErrorCode.INVALID_REQUEST)
    with SimpleClient(uri) as c:
        assert log_end(c, topic, 0) == 0


def test_acks_zero_produces_between_requests_keep_the_order(uri):
    topic = created_topic(uri)
    data = encode_message_set([b"fire and forget"])
    frames = b""
    for i in range(0, 60, 2):
        frames += api.encode_request(api.MetadataRequest((topic,)), i)
        frames += api.encode_request(produce_request(topic, 0, data, acks=0), i + 1)
    with RawSocket(uri) as raw:
        raw.send(frames + api.encode_request(api.MetadataRequest(()), 60))
        got = [raw.read_response(api.ApiKey.METADATA)[0] for _ in range(31)]
    assert got == list(range(0, 61, 2))
    with SimpleClient(uri) as c:
        assert wait_for(lambda: log_end(c, topic, 0) == 30 * len(data))


def test_a_malformed_request_closes_only_its_own_connection(uri):
    with BrokerConnection(uri) as bystander, RawSocket(uri) as raw:
        bystander.request(api.MetadataRequest(()))
        raw.send(raw_frame(99, 1))
        raw.assert_error_frame(1, ErrorCode.UNSUPPORTED_VERSION)
        assert isinstance(bystander.request(api.MetadataRequest(())), api.MetadataResponse)


def test_a_frame_sent_a_byte_at_a_time(uri):
    frame = api.encode_request(api.MetadataRequest(()), 606)
    with RawSocket(uri) as raw:
        for i in range(len(frame)):
            raw.send(frame[i:i + 1])
        assert raw.read_response(api.ApiKey.METADATA)[0] == 606


# Sockets and connections


def test_unix_socket_file_mode_is_0660(served):
    mode = os.stat(served.unix_path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o660


def _working_connection(uri_: str) -> BrokerConnection:
    """A connection that got an answer, retried while the broker forgets closed ones."""

    def attempt():
        conn = BrokerConnection(uri_, timeout=2)
        try:
            conn.connect()
            conn.request(api.MetadataRequest(()))
            return conn
        except OSError:
            conn.close()
            return None

    conn = wait_for(attempt, timeout=10)
    assert conn is not None, f"no connection to {uri_} was served"
    return conn


def test_max_connections(make_broker):
    broker = make_broker(max_connections=2)
    first = _working_connection(broker.tcp)
    second = _working_connection(broker.unix)
    try:
        for extra in (broker.tcp, broker.unix):
            with RawSocket(extra, timeout=5) as raw:
                try:
                    raw.send(api.encode_request(api.MetadataRequest(()), 1))
                except (BrokenPipeError, ConnectionResetError):
                    pass
                raw.assert_closed()
        for conn in (first, second):
            assert isinstance(conn.request(api.MetadataRequest(())), api.MetadataResponse)
        first.close()
        # A place is free again once the broker sees the close.
        _working_connection(broker.tcp).close()
    finally:
        first.close()
        second.close()


def _served(raw: RawSocket) -> bool:
    """True if the broker answered a METADATA on ``raw``, False if it closed it."""
    try:
        raw.send(api.encode_request(api.MetadataRequest(()), 1))
        raw.read_response(api.ApiKey.METADATA)
        return True
    except ConnectionError:
        return False


def test_max_connections_is_exact(make_broker):
    limit = 20
    broker = make_broker(max_connections=limit)
    assert wait_for(lambda: open_connections(broker) == 0)
    kinds = (broker.tcp, broker.unix)
    raws = [RawSocket(kinds[i % 2], timeout=10) for i in range(limit + 50)]
    try:
        served = [raw for raw in raws if _served(raw)]
        assert len(served) == limit
        assert open_connections(broker) == limit
        for raw in served[:5]:
            raw.sock.close()
        assert wait_for(lambda: open_connections(broker) == limit - 5)
        again = []
        for i in range(6):  # one at a time: the acceptor takes TCP and Unix in its own order
            raws.append(RawSocket(kinds[i % 2], timeout=10))
            again.append(_served(raws[-1]))
        assert again == [True] * 5 + [False]
        for raw in served[5:]:  # the first ones are still served
            assert _served(raw)
    finally:
        for raw in raws:
            raw.sock.close()


def test_max_connections_stays_exact_after_a_processor_is_replaced(make_broker):
    limit = 10
    broker = make_broker(max_connections=limit)
    assert wait_for(lambda: open_connections(broker) == 0)
    raws = [RawSocket(broker.tcp, timeout=10) for _ in range(limit)]
    try:
        assert all(_served(raw) for raw in raws)
        old = broker.workers()["hb-proc-0"]
        os.kill(old, signal.SIGKILL)
        broker.wait_worker_replaced("hb-proc-0", old)
        alive = [raw for raw in raws if _served(raw)]  # those of hb-proc-0 went with it
        assert 0 < len(alive) < limit
        assert wait_for(lambda: open_connections(broker) == len(alive))
        more = [RawSocket(broker.tcp, timeout=10) for _ in range(limit - len(alive) + 3)]
        raws += more
        assert sum(_served(raw) for raw in more) == limit - len(alive)
    finally:
        for raw in raws:
            raw.sock.close()
