"""SimpleConsumer against a real broker: sets, offsets, growth, resets, long poll.

One module broker (``served``) serves every test but the restart one, which keeps its
own (``broker``); each test reads and writes only topics of its own (``new_topic()``).
"""

import re
import threading

import pytest

from hostbroker.client import (EARLIEST, LATEST, BrokerConnection, BrokerError,
                               MessageSizeTooLargeError, OffsetOutOfRangeError, SimpleConsumer)
from hostbroker.errors import ErrorCode
from hostbroker.log.message import CODEC_GZIP, CODEC_SNAPPY, encode_message_set, iter_messages
from hostbroker.protocol.api import FetchPartition, FetchRequest
from tests.integration.wire_helpers import module_broker, new_topic

served = module_broker()


def payloads(prefix: str, n: int, size: int = 0) -> list[bytes]:
    return [f"{prefix}-{i}".encode().ljust(size, b".") for i in range(n)]


def produce(client, topic, values, partition=0, codec=0):
    return client.produce(topic, partition, encode_message_set(values, codec=codec))


def test_fetch_reads_plain_and_compressed_sets_with_offsets(served):
    t = new_topic("t")
    with served.client() as client:
        produce(client, t, payloads("plain", 3))
        produce(client, t, payloads("gzip", 4), codec=CODEC_GZIP)
        last = produce(client, t, payloads("snappy", 2), codec=CODEC_SNAPPY)
    with SimpleConsumer(served.unix) as consumer:
        fetched = consumer.fetch(t, 0, 0)
        messages = list(fetched)
    assert [value for _, _, value in messages] == (
        payloads("plain", 3) + payloads("gzip", 4) + payloads("snappy", 2))
    assert fetched.next_offset == fetched.log_end_offset == last.log_end_offset
    assert len(fetched) == 9 and fetched.entries == 5 and fetched.at_end
    # Plain entries chain; a wrapper's inner messages share its offset and
    # only the last moves past it.
    assert messages[0][0] == 0 and messages[1][0] == messages[0][1]
    gzip_start = messages[3][0]
    assert [m[0] for m in messages[3:7]] == [gzip_start] * 4
    assert [m[1] for m in messages[3:6]] == [gzip_start] * 3
    assert messages[6][1] == messages[7][0]


def test_a_partial_last_entry_is_left_for_the_next_fetch(served):
    t = new_topic("t")
    with served.client() as client:
        produce(client, t, payloads("m", 10, 100))
    entry = 110  # 10-byte v1 header + 100-byte payload
    with SimpleConsumer(served.tcp, fetch_size=3 * entry + 50) as consumer:
        first = consumer.fetch(t, 0, 0)
        assert [v for _, _, v in first] == payloads("m", 3, 100)
        assert first.next_offset == 3 * entry and not first.at_end
        second = consumer.fetch(t, 0, first.next_offset)
        assert [v for _, _, v in second] == payloads("m", 10, 100)[3:6]


def test_a_message_larger_than_the_fetch_size_grows_it_up_to_the_limit(served):
    t = new_topic("t")
    with served.client() as client:
        produce(client, t, [b"x" * 5000, b"small"])
    with SimpleConsumer(served.unix, fetch_size=100) as consumer:
        fetched = consumer.fetch(t, 0, 0)
        assert [v for _, _, v in fetched] == [b"x" * 5000]
    with SimpleConsumer(served.unix, fetch_size=100, fetch_message_max_bytes=4000) as consumer:
        with pytest.raises(MessageSizeTooLargeError) as info:
            consumer.fetch(t, 0, 0)
    assert info.value.needed == 5010 and info.value.limit == 4000
    assert f"{t}/0 at offset 0" in str(info.value)


def test_out_of_range_raises_with_the_wire_code_or_resets(served):
    t = new_topic("t")
    with served.client() as client:
        end = produce(client, t, payloads("m", 5)).log_end_offset
    with SimpleConsumer(served.unix) as consumer:
        with pytest.raises(OffsetOutOfRangeError) as info:
            consumer.fetch(t, 0, end + 1000)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert isinstance(info.value, BrokerError)
        assert (info.value.offset, info.value.log_end_offset) == (end + 1000, end)
        # The connection is still good after a partition's error.
        assert len(consumer.fetch(t, 0, 0)) == 5
    with SimpleConsumer(served.unix, auto_offset_reset="earliest") as consumer:
        fetched = consumer.fetch(t, 0, end + 1000)
        assert (fetched.offset, fetched.reset_from, len(fetched)) == (0, end + 1000, 5)
    with SimpleConsumer(served.unix, config={"auto.offset.reset": "latest",
                                             "fetch.wait.max.ms": 0}) as consumer:
        fetched = consumer.fetch(t, 0, end + 1000)
        assert (fetched.offset, len(fetched), bool(fetched)) == (end, 0, False)


def test_offsets_before_and_other_errors(served):
    t, nosuch = new_topic("t"), new_topic("nosuch")
    with served.client() as client:
        end = produce(client, t, payloads("m", 5)).log_end_offset
    with SimpleConsumer(served.unix) as consumer:
        assert consumer.offsets_before(t, 0, LATEST) == [end]
        assert consumer.offsets_before(t, 0, EARLIEST) == [0]
        with pytest.raises(BrokerError) as info:
            consumer.offsets_before(nosuch, 0, LATEST)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(BrokerError) as info:
            consumer.fetch(t, 7, 0)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(ValueError, match=re.escape(f"max_bytes -1 for {t}/0: must be 1 to")):
            consumer.fetch(t, 0, 0, max_bytes=-1)


def test_multifetch_asks_several_partitions_in_one_request(served):
    two = new_topic("two")
    with served.client() as client:
        client.create_topic(two, 2)
        produce(client, two, payloads("p0", 3), partition=0)
        produce(client, two, payloads("p1", 4), partition=1)
    with SimpleConsumer(served.unix, fetch_wait_max_ms=0) as consumer:
        sets = consumer.multifetch([(two, 1, 0), (two, 0, 0, 20), (two, 0, 0)])
    assert [(s.topic, s.partition) for s in sets] == [(two, 1), (two, 0), (two, 0)]
    assert [v for _, _, v in sets[0]] == payloads("p1", 4)
    assert len(sets[1]) == 1 and [v for _, _, v in sets[2]] == payloads("p0", 3)


def test_messages_walks_segments_with_the_next_fetch_in_flight(served):
    segs = new_topic("segs")
    values = payloads("seg", 300, 50)
    with served.client() as client:
        client.create_topic(segs, 1, {"segment.bytes": "2000"})
        for i in range(0, 300, 25):
            produce(client, segs, values[i:i + 25])
    with SimpleConsumer(served.tcp, fetch_size=1500) as consumer:
        read = list(consumer.messages(segs, 0, 0, stop_at_end=True))
        assert [v for _, _, v in read] == values
        assert all(a[1] == b[0] for a, b in zip(read, read[1:]))
        # Stopping early leaves nothing pending: the consumer goes on working.
        walk = consumer.messages(segs, 0, 0)
        assert next(walk)[2] == values[0]
        del walk  # collected at once: its finally drops the answer in flight
        assert consumer.offsets_before(segs, 0, LATEST) == [read[-1][1]]


def test_long_poll_returns_when_data_arrives(served):
    poll = new_topic("poll")
    with served.client() as client:
        client.create_topic(poll, 1)
    produced = threading.Event()

    def produce_later():
        produced.wait(10)
        with served.client() as client:
            produce(client, poll, [b"late"])

    thread = threading.Thread(target=produce_later)
    thread.start()
    try:
        with SimpleConsumer(served.unix, fetch_wait_max_ms=20000) as consumer:
            part = FetchPartition(poll, 0, 0, 1024)
            consumer.send_fetch([part])
            produced.set()
            (fetched,) = consumer.receive_fetch([part])
    finally:
        produced.set()
        thread.join()
    assert [v for _, _, v in fetched] == [b"late"]


def test_bad_settings_are_refused_before_any_io():
    with pytest.raises(Exception, match="auto.offset.reset: must be one of none, earliest, latest"):
        SimpleConsumer("tcp://127.0.0.1:1", auto_offset_reset="smallest")
    with pytest.raises(Exception, match="bootstrap: bad broker URI"):
        SimpleConsumer("127.0.0.1:9092")
    with pytest.raises(Exception, match="fetch.size: must be between"):
        SimpleConsumer(config={"fetch.size": "0"})


def test_a_reused_receive_buffer_serves_answers_of_any_size(served):
    t = new_topic("t")
    with served.client() as client:
        produce(client, t, payloads("a", 50, 100))
        produce(client, t, payloads("b", 20, 3000))
    with BrokerConnection(served.tcp, reuse_buffer=True) as connection:
        def fetch(offset, max_bytes):
            part = FetchPartition(t, 0, offset, max_bytes)
            answer = connection.request(FetchRequest(0, 0, (part,)))
            return answer.partitions[0].message_set

        small = fetch(0, 1000)
        buffer = connection._frame_buffer
        held = bytes(small)
        again = fetch(0, 500)
        # Same buffer, and the earlier view now shows the later answer's bytes.
        assert connection._frame_buffer is buffer and bytes(small[:500]) == bytes(again)
        assert held[:500] == bytes(again)
        big = fetch(0, 80_000)
        # An answer larger than the buffer gets a new one; older views keep theirs.
        assert connection._frame_buffer is not buffer and bytes(small[:500]) == held[:500]
        values = [m.payload for m in iter_messages(big, 0)]
        assert values == payloads("a", 50, 100) + payloads("b", 20, 3000)[:len(values) - 50]
        assert len(values) > 60


def test_multifetch_growing_one_partition_keeps_the_others_sets(served):
    two, mixed = new_topic("two"), new_topic("mixed")
    with served.client() as client:
        client.create_topic(mixed, 3)
        produce(client, mixed, [b"L" * 3000], partition=0)
        produce(client, mixed, payloads("one", 200, 20), partition=1)
        produce(client, mixed, payloads(two, 200, 20), partition=2)
    with SimpleConsumer(served.unix, fetch_wait_max_ms=0) as consumer:
        # The first answer is larger than the second fetch of partition 0's entry.
        sets = consumer.multifetch([(mixed, 0, 0, 600), (mixed, 1, 0, 5000),
                                    (mixed, 2, 0, 5000)])
    assert [v for _, _, v in sets[0]] == [b"L" * 3000]
    assert [v for _, _, v in sets[1]] == payloads("one", 200, 20)[:166]
    assert [v for _, _, v in sets[2]] == payloads(two, 200, 20)[:166]


def test_a_connection_from_before_a_broker_restart_is_replaced(broker):
    # Its own broker: it restarts it.
    with broker.client() as client:
        produce(client, "t", [b"kept"])
    with SimpleConsumer(broker.unix, fetch_wait_max_ms=0) as consumer:
        assert [v for _, _, v in consumer.fetch("t", 0, 0)] == [b"kept"]
        broker.stop()
        broker.start()
        assert [v for _, _, v in consumer.fetch("t", 0, 0)] == [b"kept"]
        broker.stop()
        broker.start()
        assert consumer.offsets_before("t", 0, EARLIEST) == [0]
