"""A bad entry inside a batch of the high-level consumer (streams.py decodes and hands out
:data:`~hostbroker.client.streams.BATCH` messages at a time): a wrapper that does not
decompress, produced (the broker never decompresses, so it takes it) just before, at and
after a batch boundary. The stream hands out every message before it, exactly, then raises
InvalidEntryError at every ``next()``; the committed offset is the bad entry's own, so a
restart meets it again; ``skip.bad.messages`` reads on past it, nothing lost."""

from __future__ import annotations

import pytest

from hostbroker.client import ConsumerConnector, InvalidEntryError, SimpleClient
from hostbroker.client.streams import BATCH
from hostbroker.log.message import CODEC_GZIP, encode_message, encode_message_set
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill

AFTER = 20


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("consumer-batches")).start()
    yield broker
    stop_or_kill(broker)


@pytest.mark.parametrize("before", [BATCH - 1, BATCH, BATCH + 1, 3 * BATCH + 100])
def test_a_bad_entry_mid_batch_stops_the_stream_right_after_the_good_ones(served, before):
    topic = f"bad-{before}"
    with SimpleClient(served.unix) as client:
        client.create_topic(topic, 1)
        client.produce(topic, 0, encode_message_set([b"%d" % i for i in range(before)]))
        bad = client.produce(topic, 0, encode_message(b"not gzip data" * 4,
                                                      codec=CODEC_GZIP)).base_offset
        client.produce(topic, 0, encode_message_set([b"after %d" % i for i in range(AFTER)]))
    config = {"auto.offset.reset": "earliest", "consumer.timeout.ms": 15000,
              "auto.commit.enable": False}
    with ConsumerConnector(served.unix, config, group_id=topic) as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        got = []
        with pytest.raises(InvalidEntryError) as caught:
            for message in stream:
                got.append(message.value)
        assert got == [b"%d" % i for i in range(before)]
        assert caught.value.offset == bad
        for _ in range(2):  # and it stays stopped there, whichever way it is asked
            with pytest.raises(InvalidEntryError):
                next(stream)
            with pytest.raises(InvalidEntryError):
                list(stream)
        connector.commit_offsets()
    with SimpleClient(served.unix) as client:
        (stored,) = client.offset_fetch(topic, [(topic, 0)])
    assert stored.offset == bad
    with ConsumerConnector(served.unix, config, group_id=topic,
                           skip_bad_messages=True) as connector:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        assert [next(stream).value for _ in range(AFTER)] == [
            b"after %d" % i for i in range(AFTER)]
