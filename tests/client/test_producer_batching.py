"""Batching, compression and partition metadata of the producer, without sockets.

Message sets are read back with the log's own reader (iter_messages), so
what the producer builds is checked against the format, not against itself.
The dispatcher is driven with a cluster whose metadata is set here, and no
request is sent.
"""

import os
import sys
import time

import pytest

from hostbroker.client import (PRODUCER_SETTINGS, DefaultPartitioner, Partitioner, Producer,
                               ProducerCallbacks, ProducerError)
from hostbroker.client.cluster import Cluster, PartitionRef, TopicPartitions
from hostbroker.client.producer import encode_batch, take_batch
from hostbroker.client.producer_batches import Encoded, split_by_size
from hostbroker.client.producer_requests import Dispatcher
from hostbroker.client.producer_queue import held_bytes
from hostbroker.client.settings import resolve
from hostbroker.errors import ConfigError, ErrorCode
from hostbroker.protocol import api
from hostbroker.log.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    encode_message_set,
    iter_messages,
    validate_message_set,
)


def read(data, base=0):
    return [(m.offset, m.payload, m.codec) for m in iter_messages(data, base)]


# -- compression ---------------------------------------------------------------


def test_plain_batch_is_the_plain_message_set():
    values = [b"a", b"bb", b""]
    data, wrappers = encode_batch(values, CODEC_NONE, 1000)
    assert data == encode_message_set(values) and wrappers is None


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_compressed_batch_is_one_wrapper(codec):
    values = [b"message %d " % i * 5 for i in range(100)]
    data, wrappers = encode_batch(values, codec, 1_000_000)
    assert validate_message_set(data) == 1
    assert wrappers == ((100, len(data)),)
    assert len(data) < sum(map(len, values))  # it did compress
    assert [(p, c) for _, p, c in read(data)] == [(v, codec) for v in values]


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_compressed_batch_split_below_message_max_bytes(codec):
    values = [os.urandom(300) for _ in range(40)]  # does not compress
    data, wrappers = encode_batch(values, codec, 2000)
    assert len(wrappers) > 1
    assert sum(n for n, _ in wrappers) == 40 and sum(size for _, size in wrappers) == len(data)
    assert validate_message_set(data, max_message_bytes=2000) == len(wrappers)
    assert [p for _, p, _ in read(data)] == values


def test_single_message_too_big_to_wrap_goes_plain():
    value = os.urandom(1990)  # its entry fits 2000, its gzip wrapper does not
    data, wrappers = encode_batch([value], CODEC_GZIP, 2000)
    assert read(data) == [(0, value, CODEC_NONE)]
    assert wrappers == ((1, len(data)),)


def inflated_sizes(data):
    """What each top-level entry of ``data`` inflates to (a plain entry: its own size)."""
    sizes = []
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        entry = data[pos:pos + 4 + length]
        inner = list(iter_messages(entry, 0))
        sizes.append(len(encode_message_set([m.payload for m in inner]))
                     if inner[0].codec != CODEC_NONE else len(entry))
        pos += 4 + length
    return sizes


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_compressed_wrappers_inflate_within_message_max_bytes(codec, monkeypatch):
    # 20 MiB that compress to almost nothing: the compressed size alone would
    # allow one wrapper, which a consumer with the default
    # fetch.message.max.bytes would refuse to inflate.
    values = [bytes(100 * 1024) for _ in range(199)] + [b"last"]
    values[7] = b"\x01" * 1000  # content and order are checked, not only sizes
    compressions = []
    real = encode_message_set

    def counting(vs, codec=CODEC_NONE):
        if codec != CODEC_NONE:
            compressions.append(len(vs))
        return real(vs, codec=codec)

    monkeypatch.setattr(sys.modules[encode_batch.__module__], "encode_message_set", counting)
    data, wrappers = encode_batch(values, codec, 1_000_000)
    assert len(wrappers) > 1
    assert compressions == [n for n, _ in wrappers]  # each run compressed once
    assert sum(n for n, _ in wrappers) == 200 and sum(size for _, size in wrappers) == len(data)
    assert all(size <= 1_000_000 for size in inflated_sizes(data))
    # runs are as long as the bound allows: the next value would not have fit
    start = 0
    for n, _ in wrappers[:-1]:
        assert len(encode_message_set(values[start:start + n + 1])) > 1_000_000
        start += n
    messages = list(iter_messages(data, 0, max_inflated_bytes=1_000_000))
    assert [(m.payload, m.codec) for m in messages] == [(v, codec) for v in values]


def test_wrapper_bound_is_inclusive_and_counts_entry_headers():
    # two values whose plain set is exactly the bound share a wrapper; one
    # byte more and they are two
    values = [bytes(495), bytes(485)]  # 505 + 495 = 1000 bytes of plain set
    _, wrappers = encode_batch(values, CODEC_GZIP, 1000)
    assert [n for n, _ in wrappers] == [2]
    _, wrappers = encode_batch([bytes(496), bytes(485)], CODEC_GZIP, 1000)
    assert [n for n, _ in wrappers] == [1, 1]


def test_single_message_that_cannot_inflate_within_the_bound_goes_plain():
    # its entry (length field 1000) is allowed, but a wrapper around it would
    # inflate to 1004 bytes, past the bound
    value = bytes(994)
    data, wrappers = encode_batch([b"a", value, b"b"], CODEC_GZIP, 1000)
    assert [(p, c) for _, p, c in read(data)] == [(b"a", CODEC_GZIP), (value, CODEC_NONE),
                                                   (b"b", CODEC_GZIP)]
    assert [n for n, _ in wrappers] == [1, 1, 1]
    assert all(size <= 1004 for size in inflated_sizes(data))


def test_split_by_size_keeps_order_and_budget():
    values = [b"x" * n for n in (10, 50, 5, 80, 1, 200, 3)]
    pieces = split_by_size(values, 100)
    assert [v for piece in pieces for v in piece] == values
    for piece in pieces:
        # a piece is within budget unless it is one value that alone is over it
        assert len(encode_message_set(piece)) <= 100 or len(piece) == 1
    assert split_by_size(values, 10_000) == [values]


# -- the queue ----------------------------------------------------------------


def test_take_batch_keyed_items_first_then_keyless_in_order():
    keyless = {"a": [b"1", b"2", b"3", b"4"], "b": [b"5"]}
    chunked: set[str] = set()
    items = [("k", b"key", None, b"x"), ("k", None, 0, [b"y", b"z"])]
    taken_keyless, taken_items, taken_chunked, count = take_batch(keyless, chunked, items, 5)
    assert taken_items == [("k", b"key", None, b"x"), ("k", None, 0, [b"y", b"z"])]
    assert taken_keyless == {"a": [b"1", b"2"]} and count == 5
    assert keyless == {"a": [b"3", b"4"], "b": [b"5"]} and items == []
    _, _, _, count = take_batch(keyless, chunked, items, 5)
    assert count == 3 and keyless == {}


def test_take_batch_takes_encoded_sets_whole():
    first, second = Encoded([b"a", b"b", b"c"]), Encoded([b"d", b"e", b"f"])
    keyless = {"t": [b"0", first, second, b"g"]}
    chunked = {"t"}
    taken, _, taken_chunked, count = take_batch(keyless, chunked, [], 2)
    assert taken == {"t": [b"0", first]} and count == 4  # passes the limit by part of a set
    assert taken_chunked == {"t"} and keyless == {"t": [second, b"g"]} and chunked == {"t"}
    taken, _, _, count = take_batch(keyless, chunked, [], 100)
    assert taken == {"t": [second, b"g"]} and count == 4 and chunked == set()


def test_held_bytes_counts_values_and_each_items_key_once():
    keyless = {"a": [b"12", b"345"], "t": [b"0", Encoded([b"ab", b"cde"])]}
    items = [("k", b"key", None, b"xy"), ("k", b"k", None, [b"y", b"zz"]),
             ("k", None, 0, Encoded([b"1234"]))]
    assert held_bytes(keyless, {"t"}, items) == 5 + 6 + (3 + 2) + (1 + 3) + 4
    assert held_bytes({}, set(), []) == 0


def test_queue_bytes_below_message_max_bytes_is_refused_in_one_line():
    with pytest.raises(ConfigError) as info:
        Producer("unix:///nonexistent/hb.sock", producer_type="async", queue_bytes=999_999)
    assert str(info.value) == ("queue.bytes: must be at least message.max.bytes (1000000) "
                               "to hold one message (got 999999)")
    with pytest.raises(ConfigError, match="queue.bytes: must be at least 1 "):
        Producer("unix:///nonexistent/hb.sock", queue_bytes=0)
    # At the bound: one message of message.max.bytes fits.
    Producer("unix:///nonexistent/hb.sock", message_max_bytes=1000, queue_bytes=1000).close()


# -- partitioning and grouping ----------------------------------------------------


class Recorder(Partitioner):
    """Keys name their partition (b"2" -> 2); keyless: always 1. Records rotations."""

    def __init__(self):
        self.rotated = []
        self.keyless_calls = 0

    def partition(self, topic, key, num_partitions):
        if key is None:
            self.keyless_calls += 1
            return 1
        return int(key)

    def rotate(self, topic):
        self.rotated.append(topic)


def dispatcher(partitions=3, partitioner=None, known=True, **options):
    settings = resolve(PRODUCER_SETTINGS, None, options)
    cluster = Cluster(["unix:///nonexistent/hb.sock"], client_id="test", timeout=1,
                      refresh_interval_ms=600000)
    refs = tuple(PartitionRef(0, "unix:///nonexistent/hb.sock", p) for p in range(partitions))
    cluster._topics["t"] = TopicPartitions("t", refs, known, time.monotonic())
    done = []
    stats = dict.fromkeys(("enqueued", "sent", "acknowledged", "failed", "requests",
                           "retries"), 0)
    d = Dispatcher(settings, cluster, partitioner or Recorder(), ProducerCallbacks(), stats,
                    done.append)
    return d, done


def test_keyless_messages_share_one_partition_per_batch_in_order():
    d, done = dispatcher()
    keyless = {"t": [b"a", Encoded([b"b", b"c"]), b"d"]}
    items = [("t", None, None, b"e"), ("t", b"2", None, b"f")]
    sets = d.make_sets(keyless, items, 0, {"t"})
    assert d.partitioner.keyless_calls == 1 and d.partitioner.rotated == ["t"]
    by_slot = {}
    for s in sets:
        by_slot.setdefault(s.slot, []).extend(p for _, p, _ in read(s.data))
    assert by_slot == {1: [b"a", b"b", b"c", b"d", b"e"], 2: [b"f"]}
    assert done == []


def test_explicit_partition_out_of_range_fails_without_sending():
    d, done = dispatcher(partitions=2)
    sets = d.make_sets({}, [("t", None, 5, b"x"), ("t", None, 0, b"y")])
    assert [s.slot for s in sets] == [0]
    assert len(done) == 1 and done[0].slot == 5
    assert done[0].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert d.stats["failed"] == 1 and d.retries == []


def test_compressed_batch_one_wrapper_per_partition():
    d, _ = dispatcher(compression_codec="snappy")
    items = [("t", b"0", None, b"v%d" % i) for i in range(50)]
    items += [("t", b"2", None, [b"w%d" % i for i in range(50)])]
    sets = d.make_sets({}, items)
    assert sorted(s.slot for s in sets) == [0, 2]
    for s in sets:
        assert validate_message_set(s.data) == 1
        assert len(read(s.data)) == 50 and {c for _, _, c in read(s.data)} == {CODEC_SNAPPY}


def test_sets_split_under_max_request_bytes():
    d, _ = dispatcher(message_max_bytes=1000, max_request_bytes=2000)
    values = [bytes([i]) * 100 for i in range(60)]  # 6600 bytes of entries
    sets = d.make_sets({}, [("t", None, 0, values)])
    assert len(sets) > 3
    assert all(len(s.data) <= d.set_budget("t") for s in sets)
    assert [p for s in sets for _, p, _ in read(s.data)] == values


def test_compressed_sets_are_cut_at_the_inflated_bound():
    # not first at max.request.bytes, which would leave a one-message wrapper
    # at the end of every request-sized set
    d, _ = dispatcher(compression_codec="gzip")
    values = [bytes(100 * 1024) for _ in range(200)]
    sets = d.make_sets({}, [("t", None, 0, values)])
    assert [[n for n, _ in s.wrappers] for s in sets] == [[9]] * 22 + [[2]]
    assert [v for s in sets for v in s.values] == values


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_offsets_of_a_set_are_those_a_reader_sees(codec):
    d, _ = dispatcher(compression_codec=codec, message_max_bytes=600)
    # compressed: the first 600 bytes of plain set do not compress into one
    # wrapper of 600, so that set holds two
    values = [os.urandom(n) for n in (10, 200, 0, 350, 50, 400)]
    sets = d.make_sets({}, [("t", None, 0, values)])
    assert [v for s in sets for v in s.values] == values
    if codec == "gzip":
        assert len(sets) == 2 and len(sets[0].wrappers) == 2
    for s in sets:
        s.base_offset = 12345
        assert s.offsets() == [offset for offset, _, _ in read(s.data, 12345)]


def test_unknown_topic_goes_to_partition_zero_of_the_first_broker():
    d, _ = dispatcher(partitions=1, known=False, partitioner=DefaultPartitioner())
    (s,) = d.make_sets({"t": [b"x"]}, [("t", b"any key", None, b"y")])
    assert s.slot == 0
    assert d._route(s) == PartitionRef(0, "unix:///nonexistent/hb.sock", 0)


def test_partitioner_out_of_range_is_refused_by_name():
    d, _ = dispatcher(partitions=2)
    with pytest.raises(ProducerError, match="chose 7 for a topic of 2 partitions"):
        d.make_sets({}, [("t", b"7", None, b"x")])


def test_keyless_batches_of_a_take_each_choose_a_partition():
    class Cycle(Recorder):
        def partition(self, topic, key, num_partitions):
            self.keyless_calls += 1
            return self.keyless_calls % num_partitions

    d, _ = dispatcher(partitions=3, partitioner=Cycle(), compression_codec="gzip")
    values = [b"%d" % i for i in range(25)]
    keyless = {"t": [*values[:5], Encoded(values[5:15]), *values[15:]]}
    sets = d.make_sets(keyless, [], 0, {"t"}, batch_size=10)
    # batches of 10: values 0-4 + the set 5-14 (never cut), then 15-24
    assert d.partitioner.keyless_calls == 2 and d.partitioner.rotated == ["t", "t"]
    by_slot = {}
    for s in sets:
        by_slot.setdefault(s.slot, []).extend(p for _, p, _ in read(s.data))
    assert by_slot == {1: values[:15], 2: values[15:]}
    # one wrapper per batch when compressing (the Encoded set is already plain)
    assert [validate_message_set(s.data) for s in sets if s.slot == 2] == [1]


# -- partitions from metadata answers -------------------------------------------------

A, B = "tcp://a:9092", "unix:///run/b.sock"


def answer(broker_id, topics, brokers=()):
    """A METADATA answer: ``topics`` maps a name to [(partition, broker_id)] or None (unknown)."""
    return api.MetadataResponse(broker_id, tuple(brokers), tuple(
        api.MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()) if parts is None
        else api.MetadataTopic(name, ErrorCode.NONE, tuple(
            api.MetadataPartition(p, ErrorCode.NONE, owner, 0, 0, "/logs") for p, owner in parts))
        for name, parts in topics.items()))


def cluster(*uris):
    return Cluster(uris, client_id="test", timeout=1, refresh_interval_ms=1000)


def test_static_list_partitions_are_the_union_by_broker_then_partition():
    c = cluster(B, A)
    merged = c._merge("t", [(B, answer(2, {"t": [(0, 2)]})),
                            (A, answer(1, {"t": [(1, 1), (0, 1)]}))], [], 0.0)
    assert merged.known and merged.partitions == (
        PartitionRef(1, A, 0), PartitionRef(1, A, 1), PartitionRef(2, B, 0))


def test_one_broker_reached_twice_counts_once():
    c = cluster(A, B)
    merged = c._merge("t", [(A, answer(1, {"t": [(0, 1)]})), (B, answer(1, {"t": [(0, 1)]}))],
                      [], 0.0)
    assert merged.partitions == (PartitionRef(1, A, 0),)


def test_partitions_of_other_brokers_use_their_listeners():
    brokers = (api.MetadataBroker(1, "a", 9092, "/run/a.sock"),
               api.MetadataBroker(7, "h7", 9093, "/run/h7.sock"))
    c = cluster(B)
    merged = c._merge("t", [(B, answer(1, {"t": [(0, 1), (1, 7)]}, brokers))], [], 0.0)
    # reached over a Unix socket: the other broker's Unix listener is preferred
    assert merged.partitions == (PartitionRef(1, B, 0), PartitionRef(7, "unix:///run/h7.sock", 1))
    c = cluster(A)
    merged = c._merge("t", [(A, answer(1, {"t": [(0, 1), (1, 7)]}, brokers))], [], 0.0)
    assert merged.partitions[1] == PartitionRef(7, "tcp://h7:9093", 1)


def test_a_silent_broker_keeps_its_partitions():
    c = cluster(A, B)
    c._topics["t"] = c._merge("t", [(A, answer(1, {"t": [(0, 1)]})),
                                    (B, answer(2, {"t": [(0, 2), (1, 2)]}))], [], 0.0)
    merged = c._merge("t", [(A, answer(1, {"t": [(0, 1)]}))], [B], 1.0)
    assert merged.partitions == (PartitionRef(1, A, 0), PartitionRef(2, B, 0),
                                 PartitionRef(2, B, 1))


def test_unknown_topic_is_provisional_on_the_first_broker_that_answered():
    c = cluster(A, B)
    merged = c._merge("t", [(B, answer(2, {"t": None}))], [A], 0.0)
    assert not merged.known and merged.partitions == (PartitionRef(2, B, 0),)
