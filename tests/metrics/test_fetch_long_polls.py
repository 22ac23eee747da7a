"""``hostbroker_fetch_long_polls`` counts every FETCH waiting for data,
wherever it waits: here a real broker whose processors keep no fetch
(``processor.local.fetch`` off), so a lone long poll goes to the handler and
from there to the partition's writer (``fetch.writer.polls``), which holds it
(``writer_polls.py``) and shows it on the process board."""

from __future__ import annotations

import pytest

from hostbroker.log.message import encode_message_set
from tests.integration.broker import Broker
from tests.integration.wire_helpers import (
    RawSocket,
    created_topic,
    fetch_frame,
    fetched,
    stop_or_kill,
    wait_for,
    waiting,
)
from tests.metrics.scrape import scraped
from tests.ports import free_port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("hb"),
                    http_listeners=f"http://127.0.0.1:{free_port()}",
                    processor_local_fetch="false", fetch_writer_polls="true")
    broker.start()
    yield broker
    stop_or_kill(broker)


def long_polls(broker) -> float:
    return scraped(broker).value("hostbroker_fetch_long_polls")


def test_a_long_poll_held_by_the_writer_shows_in_a_scrape(served):
    topic = created_topic(served.tcp)
    data = encode_message_set([b"wanted"])
    assert long_polls(served) == 0
    with RawSocket(served.tcp) as first, RawSocket(served.tcp) as second:
        first.send(fetch_frame(topic, 0, 7, max_wait_ms=20_000))
        second.send(fetch_frame(topic, 0, 8, max_wait_ms=20_000))
        assert waiting(first) and waiting(second)
        # held at the writer, not the handler
        assert wait_for(lambda: served.counter("writer", "fetch_parked") == 2)
        assert served.counter("handler", "fetch_parked") == 0
        assert served.counter("processor", "fetch_parked") == 0
        assert long_polls(served) == 2
        with served.client(served.tcp) as c:
            assert c.produce(topic, 0, data, acks=1).error_code == 0
        assert fetched(first) == (7, 0, data)
        assert fetched(second) == (8, 0, data)
    assert wait_for(lambda: long_polls(served) == 0)
    assert served.counter("writer", "fetch_parked") == 0
