"""Large frames received straight into their request-ring record as their
bytes trickle in (``processor.ring.receive``): that the log gets exactly
what was sent and the processor copies almost none of it, that another
connection's request is not held up behind a frame that stalls halfway
(what came of it moves to its connection's buffer instead), that two
connections trickling frames side by side both get through, and that a
sender that stops or goes away mid-frame leaves the ring to the others.

One processor and one handler, so every connection shares one request ring;
no PUTs, so every PRODUCE takes that ring.

Tests with the plain shared-ring settings share one module broker (``served``):
each uses its own topics, and measures counters as differences across its own
work. The ``receive=False`` case and the read-timeout test need other settings,
so each keeps its own broker."""

from __future__ import annotations

import threading
import time

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import (
    RawSocket,
    created_topic,
    log_end,
    produce_request,
    module_broker,
    read_log,
)

SHARED_RING = {"num.processors": 1, "num.handlers": 1, "processor.direct.produce": "false"}
RECEIVING = {**SHARED_RING, "processor.ring.receive": "true"}

# one broker for the tests with the shared-ring settings (ring.receive on, the default)
served = module_broker(**RECEIVING)


def message_set(tag: int, count: int = 30, size: int = 10 * 1024) -> bytes:
    return encode_message_set([bytes([tag, i % 251]) * ((size - 10) // 2) for i in range(count)])


def frame(topic: str, data: bytes, correlation_id: int, acks: int = 1) -> bytes:
    return api.encode_request(produce_request(topic, 0, data, acks=acks), correlation_id)


def answer(sock: RawSocket) -> tuple[int, int, int]:
    correlation_id, response = sock.read_response(api.ApiKey.PRODUCE)
    [p] = response.partitions
    return correlation_id, p.error_code, p.base_offset


def trickle(sock: RawSocket, data: bytes, piece: int = 16 * 1024, pause: float = 0.002) -> None:
    for at in range(0, len(data), piece):
        sock.send(data[at:at + piece])
        time.sleep(pause)


def whole_log(uri: str, topic: str) -> bytes:
    with SimpleClient(uri) as client:
        return read_log(client, topic, 0, 0, log_end(client, topic, 0), max_bytes=2 * 1024 * 1024)


@pytest.mark.parametrize("receive", [True, False])
def test_trickling_frames_reach_the_log_intact_copied_once_or_not_at_all(request, receive):
    # ring.receive on: the module broker; off: a broker of its own
    broker = (request.getfixturevalue("served") if receive else request.getfixturevalue(
        "make_broker")(**SHARED_RING, **{"processor.ring.receive": "false"}))
    topic = created_topic(broker.tcp)
    sets = [message_set(tag) for tag in range(6)]  # ~300 KiB frames, 19 pieces each
    frames = [frame(topic, data, i) for i, data in enumerate(sets)]
    copied = broker.counter("processor", "bytes_copied")
    with RawSocket(broker.unix) as sock:
        offset = 0
        for i, f in enumerate(frames):
            trickle(sock, f)
            assert answer(sock) == (i, 0, offset)
            offset += len(sets[i])
    copied = broker.counter("processor", "bytes_copied") - copied
    sent = sum(len(f) for f in frames)
    assert whole_log(broker.tcp, topic) == b"".join(sets)
    if receive:
        # only the first piece of each frame, read before its size was known
        assert copied <= 0.1 * sent, (copied, sent)
    else:
        # gathered in the connection's buffer, then copied into the ring
        assert copied >= 0.9 * sent, (copied, sent)


def test_a_frame_stalled_halfway_holds_up_no_other_connection(served):
    broker = served
    topic = created_topic(broker.tcp)
    big = message_set(1)
    small = encode_message_set([b"small"])
    big_frame = frame(topic, big, 7)
    half = len(big_frame) // 2
    copied = broker.counter("processor", "bytes_copied")
    with RawSocket(broker.unix) as slow, RawSocket(broker.tcp) as other:
        trickle(slow, big_frame[:half])
        time.sleep(0.2)  # the processor has taken all of it into the ring record
        started = time.monotonic()
        other.send(frame(topic, small, 1, acks=-1))  # through the same ring, to the handler
        assert answer(other) == (1, 0, 0)
        assert time.monotonic() - started < 2.0
        trickle(slow, big_frame[half:])
        assert answer(slow) == (7, 0, len(small))
    # what had come of the stalled frame moved to its connection's buffer
    assert broker.counter("processor", "bytes_copied") - copied >= half - 4
    assert whole_log(broker.tcp, topic) == small + big


def test_two_connections_trickling_side_by_side(served):
    broker = served
    topics = [created_topic(broker.tcp), created_topic(broker.tcp)]
    sets = [[message_set(10 * c + i, count=25) for i in range(4)] for c in range(2)]
    errors: list[BaseException] = []

    def client(c: int, uri: str) -> None:
        try:
            with RawSocket(uri) as sock:
                offset = 0
                for i, data in enumerate(sets[c]):
                    trickle(sock, frame(topics[c], data, i), piece=8 * 1024, pause=0.001)
                    assert answer(sock) == (i, 0, offset)
                    offset += len(data)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(0, broker.unix)),
               threading.Thread(target=client, args=(1, broker.tcp))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for c in range(2):
        assert whole_log(broker.tcp, topics[c]) == b"".join(sets[c])


def test_senders_that_stop_or_vanish_mid_frame_leave_the_ring_to_the_others(make_broker):
    # its own broker: a read timeout of its own, and an exact count of processor errors
    broker = make_broker(**SHARED_RING, **{"socket.request.read.timeout.ms": 500})
    topic = created_topic(broker.tcp)
    big = message_set(3)
    big_frame = frame(topic, big, 5)
    errors = broker.counter("processor", "errors")
    with RawSocket(broker.unix) as gone:
        trickle(gone, big_frame[:len(big_frame) // 3])
        time.sleep(0.1)
    with RawSocket(broker.unix) as stalled:
        trickle(stalled, big_frame[:len(big_frame) // 2])
        started = time.monotonic()
        stalled.assert_closed()  # the read timeout ends a frame that stopped coming
        assert 0.3 < time.monotonic() - started < 5.0
    assert broker.counter("processor", "errors") - errors == 1
    with RawSocket(broker.unix) as sock:
        trickle(sock, big_frame)
        assert answer(sock) == (5, 0, 0)
    assert whole_log(broker.tcp, topic) == big
