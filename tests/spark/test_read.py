"""Batch reads of the hostbroker data source against a real broker and a real Spark."""

from __future__ import annotations

import json
import time

import pytest
from hostbroker.client import EARLIEST, Producer, SimpleConsumer
from tests.integration.wire_helpers import module_broker

# the refusals below need a broker to name, not one each: they read nothing
refusing = module_broker()


def produce(uri, topic, values, *, partition=0, codec="none"):
    with Producer(uri, compression_codec=codec) as producer:
        producer.send_many(topic, values, partition=partition)


def topic_rows(uri, topic, partitions):
    rows = []
    with SimpleConsumer(uri) as consumer:
        for p in partitions:
            (start,) = consumer.offsets_before(topic, p, EARLIEST)
            for offset, nxt, value in consumer.messages(topic, p, start, stop_at_end=True):
                rows.append((topic, p, offset, nxt, value))
    return sorted(rows)


def test_batch_read_of_two_topics(spark, broker):
    with broker.client() as client:
        client.create_topic("alpha", 3)
        client.create_topic("beta", 1)
    for p in range(3):
        produce(broker.tcp, "alpha", [f"a{p}-{i}".encode() for i in range(50 + p)], partition=p)
    produce(broker.tcp, "beta", [f"b{i}".encode() * 3 for i in range(40)], codec="gzip")
    produce(broker.tcp, "beta", [b"plain"], codec="none")
    df = (spark.read.format("hostbroker").option("bootstrap", broker.tcp)
          .option("subscribe", "alpha,beta").load())
    got = sorted(tuple(r) for r in df.collect())
    want = topic_rows(broker.tcp, "alpha", range(3)) + topic_rows(broker.tcp, "beta", [0])
    assert got == sorted(want)
    assert len(got) == 50 + 51 + 52 + 41


def read(spark, broker, **options):
    reader = spark.read.format("hostbroker").option("bootstrap", broker.tcp)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows_of(df):
    return sorted(tuple(r) for r in df.collect())


def log_ends(broker, topic):
    with broker.client() as client:
        meta = client.metadata([topic])
    return {p.partition: (p.log_start_offset, p.log_end_offset) for p in meta.topics[0].partitions}


def test_ranges_by_offsets_and_split_by_bytes(spark, broker):
    with broker.client() as client:
        client.create_topic("ranged", 2)
    for p in range(2):
        produce(broker.tcp, "ranged", [f"{p}:{i:04d}".encode() * 10 for i in range(100)],
                partition=p)
    everything = topic_rows(broker.tcp, "ranged", [0, 1])
    offsets0 = [r[2] for r in everything if r[1] == 0]
    start, end = offsets0[10], offsets0[60]
    df = read(spark, broker, assign='{"ranged": [0]}',
              startingOffsets=json.dumps({"ranged": {"0": start}}),
              endingOffsets=json.dumps({"ranged": {"0": end}}))
    assert rows_of(df) == [r for r in everything if r[1] == 0 and start <= r[2] < end]
    # the other partition defaults to earliest .. latest; -2 / -1 mean the same
    df = read(spark, broker, subscribe="ranged",
              startingOffsets=json.dumps({"ranged": {"0": start, "1": -2}}),
              endingOffsets=json.dumps({"ranged": {"0": -1}}))
    assert rows_of(df) == [r for r in everything if r[1] == 1 or r[2] >= start]
    # maxBytesPerPartition: one partition's 100 entries of 50 bytes split inside one
    # segment at entry boundaries, by reading
    entry = offsets0[1] - offsets0[0]
    df = read(spark, broker, subscribe="ranged", maxBytesPerPartition=str(entry * 30 + 7))
    assert df.rdd.getNumPartitions() == 2 * 4  # 30 + 30 + 30 + 10 entries per partition
    assert rows_of(df) == everything


def test_compressed_sets_split_only_between_wrappers(spark, broker):
    with broker.client() as client:
        client.create_topic("packed", 1)
    for batch in range(6):
        produce(broker.tcp, "packed", [f"{batch}-{i}".encode() for i in range(25)], codec="snappy")
    everything = topic_rows(broker.tcp, "packed", [0])
    wrappers = sorted({r[2] for r in everything})
    assert len(wrappers) == 6 and len(everything) == 150
    df = read(spark, broker, subscribe="packed", maxBytesPerPartition="1")
    assert df.rdd.getNumPartitions() == 6  # one wrapper per range: never inside one
    assert rows_of(df) == everything


def test_ranges_by_time_tile_the_log_at_segment_boundaries(spark, make_broker, tmp_path):
    broker = make_broker()
    with broker.client() as client:
        client.create_topic("timed", 1, {"segment.bytes": "1024"})
    for i in range(0, 40, 5):  # sets of 5 entries, 3 to a segment
        produce(broker.tcp, "timed", [f"old-{j:03d}".encode() * 8 for j in range(i, i + 5)])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(0, 40, 5):
        produce(broker.tcp, "timed", [f"new-{j:03d}".encode() * 8 for j in range(i, i + 5)])
    everything = topic_rows(broker.tcp, "timed", [0])
    from hostbroker.spark.options import read_options
    from hostbroker.spark.planning import Planner
    with Planner(read_options({"bootstrap": broker.tcp, "subscribe": "timed"},
                              streaming=False)) as planner:
        bases = planner.segment_starts("timed", 0)
    first_new = min(r[2] for r in everything if r[4].startswith(b"new"))
    boundary = max(b for b in bases if b <= first_new)
    assert len(bases) > 4
    later = rows_of(read(spark, broker, subscribe="timed", startingTimestamp=str(cut)))
    earlier = rows_of(read(spark, broker, subscribe="timed", endingTimestamp=str(cut)))
    assert later == [r for r in everything if r[2] >= boundary]
    assert earlier == [r for r in everything if r[2] < boundary]
    assert all(r[4].startswith(b"new") for r in everything if r[2] > first_new)
    assert sorted(later + earlier) == everything  # no overlap, no gap


def test_range_deleted_by_retention(spark, make_broker):
    broker = make_broker(log_retention_check_interval_ms=100)
    with broker.client() as client:
        client.create_topic("kept", 1, {"segment.bytes": "1024", "retention.bytes": "2048"})
    for i in range(0, 60, 5):  # sets of 5 entries of 44 bytes: 4 sets to a segment
        produce(broker.tcp, "kept", [f"m{j:03d}".encode() * 10 for j in range(i, i + 5)])
    deadline = time.monotonic() + 30
    while log_ends(broker, "kept")[0][0] == 0:
        assert time.monotonic() < deadline, "retention never ran"
        time.sleep(0.1)
    log_start, log_end = log_ends(broker, "kept")[0]
    from_zero = json.dumps({"kept": {"0": 0}})
    with pytest.raises(Exception, match=r"kept/0: bytes \[0, \d+\) were deleted by retention"):
        read(spark, broker, subscribe="kept", startingOffsets=from_zero).collect()
    rows = rows_of(read(spark, broker, subscribe="kept", startingOffsets=from_zero,
                        failOnDataLoss="false"))
    assert rows == topic_rows(broker.tcp, "kept", [0]) and rows
    assert rows[0][2] >= log_start and rows[-1][3] <= log_end


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "a", "colour": "red"}, "option colour: unknown option"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "option subscribe: conflicts with assign"),
    ({}, "option subscribe: exactly one of subscribe, subscribePattern and assign"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "option startingOffsets: latest cannot"),
    ({"subscribe": "a", "startingOffsets": "{nope"}, "option startingOffsets: '{nope' is not"),
    ({"subscribe": "a", "maxBytesPerTrigger": "10"}, "option maxBytesPerTrigger: not an option"),
    ({"subscribe": "a", "maxBytesPerPartition": "0"},
     r"option maxBytesPerPartition: 0 is not a whole number of bytes \(at least 1\)"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "option failOnDataLoss: 'maybe' must be"),
    ({"subscribePattern": "("}, "option subscribePattern: '\\(' is not a regular expression"),
    ({"subscribe": "a", "hostbroker.fetch.size": "-1"}, "option hostbroker.fetch.size"),
    ({"subscribe": "a", "hostbroker.auto.offset.reset": "earliest"},
     "option hostbroker.auto.offset.reset: set by this source itself"),
    ({"subscribe": "no_such_topic"}, "topic no_such_topic does not exist"),
])
def test_bad_options_fail_with_one_line_naming_them(spark, refusing, options, message):
    with pytest.raises(Exception, match=message):
        read(spark, refusing, **options).collect()


def test_stream_only_and_batch_only_options(spark, refusing):
    query = (spark.readStream.format("hostbroker").option("bootstrap", refusing.tcp)
             .option("subscribe", "a").option("endingOffsets", "latest").load()
             .writeStream.format("noop").start())
    try:
        with pytest.raises(Exception, match="option endingOffsets: not an option of a stream"):
            query.awaitTermination(60)
    finally:
        query.stop()
