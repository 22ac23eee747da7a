"""Long-poll FETCHes parked at the partition's writer (``fetch.writer.polls``):
held there rather than at the handler, answered as soon as an append brings
the data, and bounded. The processors here
keep no fetch themselves (``processor.local.fetch``): a lone FETCH goes to
the handler. What holds wherever a fetch waits (min_bytes, the deadline,
its topic deleted, its writer dying, the broker stopping) is in
``test_local_fetch.py``."""

from __future__ import annotations

import time

import pytest

from hostbroker.log.message import encode_message_set
from tests.integration.wire_helpers import RawSocket, created_topic, fetch_frame, fetched, waiting


@pytest.fixture
def make_broker(make_broker):
    """Brokers whose processors keep no fetch (``processor.local.fetch`` off), so
    a lone one reaches the handler and from there its writer."""
    def make(**settings):
        return make_broker(**{"processor.local.fetch": "false", **settings})
    return make


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
