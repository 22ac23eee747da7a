"""Long-poll FETCHes parked at the partition's writer (``fetch.writer.polls``):
held there rather than at the handler, answered as soon as an append brings
``min_bytes`` or at the deadline, given back to the handler when the topic
goes, answered when the writer dies or the broker stops, and bounded."""

from __future__ import annotations

import os
import select
import signal
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import RawSocket, created_topic


def fetch_frame(topic: str, offset: int, correlation_id: int, max_wait_ms: int = 5000,
                min_bytes: int = 1) -> bytes:
    return api.encode_request(api.FetchRequest(max_wait_ms, min_bytes, (
        api.FetchPartition(topic, 0, offset, 1 << 20),)), correlation_id)


def fetched(sock: RawSocket) -> tuple[int, int, bytes]:
    """(correlation id, error, message set) of the next FETCH answer."""
    correlation_id, response = sock.read_response(api.ApiKey.FETCH)
    [p] = response.partitions
    return correlation_id, p.error_code, bytes(p.message_set)


def waiting(sock: RawSocket, seconds: float = 0.3) -> bool:
    """Nothing to read on ``sock`` for ``seconds``: the fetch still waits."""
    return not select.select([sock.sock], [], [], seconds)[0]


def produce(broker, topic: str, data: bytes, acks: int = 1) -> None:
    with broker.client(broker.tcp) as c:
        assert c.produce(topic, 0, data, acks=acks).error_code == 0


@pytest.mark.parametrize("polls", [True, False])
def test_a_long_poll_waits_at_the_writer_and_gets_the_data(make_broker, polls):
    broker = make_broker(**{"fetch.writer.polls": str(polls).lower()})
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"first"])
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 7))
        assert waiting(sock)
        # parked at the writer, or (off) at the handler
        assert broker.counter("handler", "fetch_parked") == (0 if polls else 1)
        produce(broker, topic, data)
        assert fetched(sock) == (7, 0, data)


def test_min_bytes_and_the_deadline(make_broker):
    broker = make_broker()
    topic = created_topic(broker.tcp)
    one = encode_message_set([b"x" * 100])
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 1, min_bytes=2 * len(one)))
        produce(broker, topic, one)
        assert waiting(sock)  # one entry is less than min_bytes
        produce(broker, topic, one)
        assert fetched(sock) == (1, 0, one * 2)
        started = time.monotonic()
        sock.send(fetch_frame(topic, 2 * len(one), 2, max_wait_ms=400))
        assert fetched(sock) == (2, 0, b"")  # nothing came: empty at the deadline
        assert 0.3 < time.monotonic() - started < 3


def test_a_poll_whose_topic_is_deleted_is_answered_as_a_handler_would(make_broker):
    broker = make_broker()
    topic = created_topic(broker.tcp)
    with RawSocket(broker.tcp) as sock:
        sock.send(fetch_frame(topic, 0, 3, max_wait_ms=10_000))
        assert waiting(sock)
        with broker.client(broker.tcp) as c:
            c.delete_topic(topic)
        correlation_id, error, data = fetched(sock)
        assert (correlation_id, error, data) == (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, b"")


def test_a_poll_held_by_a_writer_that_dies_is_answered(make_broker):
    broker = make_broker()
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"after"])
    writer = broker.workers()["hb-writer-0"]
    with RawSocket(broker.tcp, timeout=30) as sock:
        sock.send(fetch_frame(topic, 0, 4, max_wait_ms=20_000))
        assert waiting(sock)
        os.kill(writer, signal.SIGKILL)
        broker.wait_worker_replaced("hb-writer-0", writer)
        # its handler has it again, parked: the next append answers it
        produce(broker, topic, data)
        assert fetched(sock) == (4, 0, data)


def test_polls_over_the_bound_wait_at_the_handler(make_broker):
    broker = make_broker(**{"fetch.max.parked": 2})
    topic = created_topic(broker.tcp)
    data = encode_message_set([b"all"])
    socks = [RawSocket(broker.tcp).__enter__() for _ in range(4)]
    try:
        for i, sock in enumerate(socks):
            sock.send(fetch_frame(topic, 0, i))
        time.sleep(0.3)
        assert all(waiting(s, 0.05) for s in socks)
        assert broker.counter("handler", "fetch_parked") == 2  # the writer holds two
        produce(broker, topic, data)
        assert [fetched(s) for s in socks] == [(i, 0, data) for i in range(4)]
    finally:
        for sock in socks:
            sock.__exit__(None, None, None)


def test_a_stopping_broker_answers_the_polls_its_writers_hold(make_broker):
    broker = make_broker()
    topic = created_topic(broker.tcp)
    with RawSocket(broker.tcp, timeout=30) as sock:
        sock.send(fetch_frame(topic, 0, 5, max_wait_ms=60_000))
        assert waiting(sock)
        started = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        assert fetched(sock) == (5, 0, b"")
        assert broker.proc.wait(30) == 0
        assert time.monotonic() - started < 15
