"""Large request frames on their way to the handler: straight into the request
ring when the socket holds the whole rest, through the connection's buffer when
it trickles in, in fragments when larger than a ring record. Whatever the way,
the log gets exactly the bytes sent, in order, and answers keep their order."""

from __future__ import annotations

import time

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    RawSocket,
    created_topic,
    log_end,
    module_broker,
    produce_request,
    read_log,
    uri,
)

# 4 MiB rings: one record holds up to 1 MiB
served = module_broker(ring_bytes=4 * 1024 * 1024)


def entries(count: int, tag: int, size: int = 10 * 1024) -> bytes:
    return encode_message_set([bytes([tag, i % 251]) * ((size - 10) // 2) for i in range(count)])


def produce_frame(topic: str, message_set: bytes, correlation_id: int) -> bytes:
    return api.encode_request(produce_request(topic, 0, message_set), correlation_id)


def answers(sock: RawSocket, count: int) -> list[tuple[int, int, int]]:
    """(correlation id, error, base offset) of the next ``count`` PRODUCE answers."""
    out = []
    for _ in range(count):
        correlation_id, response = sock.read_response(api.ApiKey.PRODUCE)
        [result] = response.partitions
        out.append((correlation_id, result.error_code, result.base_offset))
    return out


def check_log(uri_: str, topic: str, sets: list[bytes]) -> None:
    with SimpleClient(uri_) as client:
        end = log_end(client, topic, 0)
        assert end == sum(map(len, sets))
        assert read_log(client, topic, 0, 0, end, max_bytes=2 * 1024 * 1024) == b"".join(sets)


def test_pipelined_large_frames_sent_whole_land_intact_and_in_order(uri):
    topic = created_topic(uri)
    sets = [entries(60, tag) for tag in range(8)]  # ~600 KiB frames
    small = entries(1, 99, size=100)
    with RawSocket(uri) as sock:
        # every large frame with a small one right behind it in the same write
        sock.send(b"".join(produce_frame(topic, s, 2 * i) + produce_frame(topic, small, 2 * i + 1)
                           for i, s in enumerate(sets)))
        got = answers(sock, 2 * len(sets))
    expected, offset = [], 0
    for i, s in enumerate(sets):
        expected += [(2 * i, 0, offset), (2 * i + 1, 0, offset + len(s))]
        offset += len(s) + len(small)
    assert got == expected
    check_log(uri, topic, [x for s in sets for x in (s, small)])


def test_a_large_frame_that_trickles_in_lands_intact(uri):
    topic = created_topic(uri)
    data = entries(80, 7)
    frame = produce_frame(topic, data, 1)
    with RawSocket(uri) as sock:
        for start in range(0, len(frame), len(frame) // 5 + 1):
            sock.send(frame[start:start + len(frame) // 5 + 1])
            time.sleep(0.05)
        assert answers(sock, 1) == [(1, 0, 0)]
    check_log(uri, topic, [data])


@pytest.mark.parametrize("count", [150, 400])  # ~1.5 and ~4 MiB: more than one ring record
def test_a_frame_larger_than_a_ring_record_lands_intact(uri, count):
    topic = created_topic(uri)
    data = entries(count, 3)
    with RawSocket(uri) as sock:
        sock.send(produce_frame(topic, data, 5) + produce_frame(topic, data, 6))
        assert answers(sock, 2) == [(5, 0, 0), (6, 0, len(data))]
    check_log(uri, topic, [data, data])
