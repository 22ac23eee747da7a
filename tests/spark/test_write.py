"""``df.write`` / ``df.writeStream`` in format ``hostbroker`` against a real broker.

Every write is read back with a plain SimpleConsumer and compared exactly.
One broker serves the module (topics are not auto-created, so an unknown
topic is an error); each test makes its own topics.
"""

from __future__ import annotations

import collections
import itertools

import pytest

from hostbroker.client import SimpleClient, SimpleConsumer, stable_hash
from tests.integration.wire_helpers import module_broker, wait_for

served = module_broker(auto_create_topics_enable="false")
_names = itertools.count()


def new_topic(broker, partitions: int) -> str:
    topic = f"w{next(_names)}"
    with SimpleClient(broker.unix) as client:
        client.create_topic(topic, partitions)
    return topic


def read_back(broker, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every value of every partition, in log order."""
    with SimpleConsumer(broker.unix) as consumer:
        return {p: [v for _, _, v in consumer.messages(topic, p, 0, stop_at_end=True)]
                for p in range(partitions)}


def entries(broker, topic: str, partition: int) -> int:
    """Top-level entries of the partition (a compressed wrapper counts once)."""
    with SimpleConsumer(broker.unix) as consumer:
        return sum(s.entries for s in consumer.sets(topic, partition, 0, stop_at_end=True))


def writer(df, broker, **options):
    w = df.write.format("hostbroker").mode("append").option("bootstrap", broker.unix)
    for key, value in options.items():
        w = w.option(key, value)
    return w


def test_values_with_topic_option_all_arrive(spark, served):
    topic = new_topic(served, 2)
    rows = [(f"message {i}",) for i in range(300)]
    df = spark.createDataFrame(rows, "value string").repartition(3)
    writer(df, served, topic=topic).save()
    got = read_back(served, topic, 2)
    assert collections.Counter(v for vs in got.values() for v in vs) == collections.Counter(
        r[0].encode() for r in rows)


def test_topic_partition_and_key_columns_route_rows(spark, served):
    a, b = new_topic(served, 2), new_topic(served, 3)
    rows = [(a if i % 3 else b, bytes([i]), i % 2 if i % 5 == 0 else None, f"k{i % 7}")
            for i in range(60)]
    df = spark.createDataFrame(rows, "topic string, value binary, partition int, key string")
    writer(df, served).save()

    expected = {a: {p: [] for p in range(2)}, b: {p: [] for p in range(3)}}
    for topic, value, partition, key in rows:
        n = len(expected[topic])
        where = partition if partition is not None else stable_hash(key.encode()) % n
        expected[topic][where].append(value)
    for topic, parts in expected.items():
        got = read_back(served, topic, len(parts))
        # Rows of a partition arrive in order within each Spark task; compare as multisets.
        assert {p: sorted(v) for p, v in got.items()} == {p: sorted(v) for p, v in parts.items()}


def test_partition_column_alone_puts_rows_where_asked(spark, served):
    topic = new_topic(served, 4)
    rows = [(f"v{i}", i % 4) for i in range(40)]
    df = spark.createDataFrame(rows, "value string, partition long").coalesce(1)
    writer(df, served, topic=topic).save()
    assert read_back(served, topic, 4) == {
        p: [f"v{i}".encode() for i in range(40) if i % 4 == p] for p in range(4)}


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
def test_compressed_write_reads_back_equal_in_wrappers(spark, served, codec):
    topic = new_topic(served, 1)
    values = [f"compressible {i % 10} " * 5 for i in range(500)]
    df = spark.createDataFrame([(v,) for v in values], "value string").coalesce(1)
    writer(df, served, topic=topic, compression=codec).save()
    assert read_back(served, topic, 1) == {0: [v.encode() for v in values]}
    assert 1 <= entries(served, topic, 0) < 10


def test_option_topic_overrides_the_topic_column(spark, served):
    topic = new_topic(served, 1)
    df = spark.createDataFrame([("nowhere", "x"), ("nowhere", "y")], "topic string, value string")
    writer(df, served, topic=topic).save()
    assert sorted(read_back(served, topic, 1)[0]) == [b"x", b"y"]


def _fails_before_any_job(spark, df, match, **options):
    sc = spark.sparkContext
    group = f"bad-input-{next(_names)}"
    sc.setJobGroup(group, "a write refused on the driver")
    try:
        broker, mode = options.pop("broker"), options.pop("mode", "append")
        with pytest.raises(Exception, match=match):
            writer(df, broker, **options).mode(mode).save()
        assert sc.statusTracker().getJobIdsForGroup(group) == []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


@pytest.mark.parametrize("schema,rows,options,match", [
    ("topic string", [("t",)], {}, "hostbroker data source: column value: required"),
    ("value int", [(1,)], {"topic": "t"},
     "hostbroker data source: column value: must be binary or string, not int"),
    ("value string, extra string", [("v", "e")], {"topic": "t"},
     "hostbroker data source: column extra: not a column this sink takes"),
    ("value string, key int", [("v", 1)], {"topic": "t"},
     "hostbroker data source: column key: must be binary or string, not int"),
    ("value string", [("v",)], {}, "hostbroker data source: option topic: required"),
    ("value string", [("v",)], {"topic": "t", "mode": "overwrite"},
     "hostbroker data source: a topic is only appended to: use mode append"),
])
def test_bad_inputs_fail_before_any_job(spark, served, schema, rows, options, match):
    df = spark.createDataFrame(rows, schema)
    _fails_before_any_job(spark, df, match, broker=served, **options)


def test_unknown_topic_fails_the_task_with_the_brokers_error(spark, served):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match=r"write to nosuch/0 failed: UNKNOWN_TOPIC_OR_PARTITION"
                                        r".* \(1 message not delivered; this task had "):
        writer(df, served, topic="nosuch").save()


def test_an_unreachable_broker_is_named_first_in_a_short_error(spark, tmp_path):
    # Before: 9 (task) and 32 (plan) lines of traceback and causes, the reason last, and
    # a write's naming no broker ("t/None: [Errno 2] No such file or directory").
    uri = f"unix://{tmp_path}/hb.sock"
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception) as written:
        df.write.format("hostbroker").option("bootstrap", uri).option("topic", "t") \
            .mode("append").save()
    with pytest.raises(Exception) as read:
        spark.read.format("hostbroker").option("bootstrap", uri).option("subscribe", "t") \
            .load().collect()
    for failed, ours in [(written, "WriteError: hostbroker data source: write to t failed: "),
                         (read, "FileNotFoundError: ")]:
        text = [line for line in str(failed.value).splitlines()
                if line.strip() and "SQLSTATE" not in line]
        assert len(text) <= 5, text
        assert f"{ours}cannot reach {uri}: [Errno 2] No such file or directory" in text[-1], text


def test_a_value_too_large_fails_naming_topic_and_size(spark, served):
    topic = new_topic(served, 1)
    df = spark.createDataFrame([("small",), ("x" * 2000,)], "value string").coalesce(1)
    with pytest.raises(Exception, match=f"a message of 2000 bytes for {topic} exceeds "
                                        r"message.max.bytes \(1000"):
        writer(df, served, topic=topic, **{"hostbroker.message.max.bytes": "1000"}).save()


def test_a_null_value_fails_naming_its_row(spark, served):
    topic = new_topic(served, 1)
    df = spark.createDataFrame([("a",), (None,)], "value string").coalesce(1)
    with pytest.raises(Exception, match=r"column value: null in row 1 of input partition 0 "
                                        r"\(the log has no null message\)"):
        writer(df, served, topic=topic).save()


def test_stream_of_files_lands_every_row(spark, served, tmp_path):
    topic = new_topic(served, 2)
    source = tmp_path / "in"
    source.mkdir()
    lines = [f"line {i}" for i in range(50)]
    for n in range(2):
        (source / f"part{n}.txt").write_text("\n".join(lines[n::2]) + "\n")
    query = (spark.readStream.text(str(source))
             .writeStream.format("hostbroker").queryName("files_to_topic")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .option("bootstrap", served.tcp).option("topic", topic)
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(60)
    finally:
        query.stop()
    assert query.exception() is None
    got = read_back(served, topic, 2)
    assert sorted(v for vs in got.values() for v in vs) == sorted(x.encode() for x in lines)



def test_a_task_reports_what_the_log_holds(served):
    # BatchWriter.write as Spark's task calls it, on Arrow batches: its commit message.
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from hostbroker.spark.options import write_options
    from hostbroker.spark.writer import BatchWriter, describe, merge

    topic = new_topic(served, 3)
    opts = write_options({"bootstrap": served.unix, "topic": topic}, streaming=False)
    schema = StructType([StructField("value", BinaryType()), StructField("key", StringType())])
    w = BatchWriter(opts, schema, False)
    batches = [pa.record_batch([pa.array([b"v%d" % i for i in range(n)]),
                                pa.array([f"k{i % 5}" for i in range(n)])], names=["value", "key"])
               for n in (40, 25)]
    summary = w.write(iter(batches))
    got = read_back(served, topic, 3)
    with SimpleClient(served.unix) as client:
        ends = {p: client.offsets(topic, p, -1)[0] for p in range(3)}
    assert summary.counts == {(topic, p): [len(got[p]), ends[p]] for p in range(3) if got[p]}
    assert summary.messages == 65 and summary.acknowledged
    total = merge([summary, None, summary])
    assert total.messages == 130 and total.bytes == 2 * sum(ends.values())
    assert describe(summary).startswith(f"65 messages ({sum(ends.values())} bytes) acknowledged: ")


def test_acks_zero_writes_without_answers(spark, served):
    topic = new_topic(served, 1)
    df = spark.createDataFrame([(f"z{i}",) for i in range(20)], "value string").coalesce(1)
    writer(df, served, topic=topic, acks="0").save()
    # Nothing was answered: the messages were on the socket when the write ended.
    expected = {0: [f"z{i}".encode() for i in range(20)]}
    assert wait_for(lambda: read_back(served, topic, 1) == expected)


def test_producer_settings_refused_together_fail_on_the_driver(spark, served):
    df = spark.createDataFrame([("v",)], "value string")
    _fails_before_any_job(spark, df, "option hostbroker.batch.size: must not exceed queue.size",
                          broker=served, topic="t",
                          **{"hostbroker.batch.size": "500", "hostbroker.queue.size": "100"})


def test_complete_output_mode_is_refused(spark, served, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.txt").write_text("a\nb\na\n")
    counts = spark.readStream.text(str(source)).groupBy("value").count()
    query = (counts.selectExpr("value").writeStream.format("hostbroker")
             .outputMode("complete").option("bootstrap", served.unix).option("topic", "t")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception, match="a topic is only appended to: use outputMode append"):
            query.awaitTermination(60)
    finally:
        query.stop()
