"""Streaming reads: data produced while a query runs, a restart from the checkpoint,
read limits, partitions that appear, Trigger.AvailableNow."""

from __future__ import annotations

import json
import time

from hostbroker.client import Producer
from tests.spark.test_read import topic_rows


def stream(spark, broker, **options):
    reader = spark.readStream.format("hostbroker").option("bootstrap", broker.tcp)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def output_rows(spark, path):
    return sorted(tuple(r) for r in spark.read.parquet(str(path))
                  .select("topic", "partition", "offset", "next_offset", "value").collect())


def wait_for(condition, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_stream_stopped_and_restarted_loses_and_repeats_nothing(spark, broker, tmp_path):
    with broker.client() as client:
        client.create_topic("events", 2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    with Producer(broker.tcp) as producer:
        producer.send_many("events", [f"early-{i}".encode() for i in range(30)], partition=0)
        df = stream(spark, broker, subscribe="events", startingOffsets="earliest")
        query = (df.writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            for i in range(5):
                producer.send_many("events", [f"live-{i}-{j}".encode() for j in range(20)],
                                   partition=i % 2)
                time.sleep(0.3)
            ends = {"0": None}

            def caught_up():
                progress = query.lastProgress
                if not progress or not progress["sources"]:
                    return False
                end = json.loads(progress["sources"][0]["endOffset"] or "{}")
                ends["0"] = end
                return end == {"events": {str(p): o for p, o in _log_ends(broker, 2).items()}}
            wait_for(caught_up, what="the query to reach the log end")
        finally:
            query.stop()
        # produced while stopped: read by the restarted query, from its checkpoint
        producer.send_many("events", [f"after-{i}".encode() for i in range(25)], partition=1)
    query = (stream(spark, broker, subscribe="events", startingOffsets="earliest")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert output_rows(spark, out) == topic_rows(broker.tcp, "events", [0, 1])
    assert len(output_rows(spark, out)) == 30 + 100 + 25


def _log_ends(broker, partitions, topic="events"):
    with broker.client() as client:
        meta = client.metadata([topic])
    ends = {p.partition: p.log_end_offset for p in meta.topics[0].partitions}
    assert len(ends) == partitions
    return ends


def run_available_now(spark, df, out, checkpoint):
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    return query


def test_max_bytes_per_trigger_cuts_batches_at_entries(spark, broker, tmp_path):
    with broker.client() as client:
        client.create_topic("limited", 2)
    with Producer(broker.tcp) as producer:
        for p in range(2):
            producer.send_many("limited", [f"{p}-{i:05d}".encode() * 4 for i in range(60)],
                               partition=p)
    everything = topic_rows(broker.tcp, "limited", [0, 1])
    entry = everything[1][2] - everything[0][2]
    limit = entry * 25 + 3  # 12 entries of each partition a batch, shared by lag
    query = run_available_now(
        spark, stream(spark, broker, subscribe="limited", startingOffsets="earliest",
                      maxBytesPerTrigger=str(limit)),
        tmp_path / "out", tmp_path / "cp")
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    for progress in batches:
        start = json.loads(progress["sources"][0]["startOffset"] or "null") or {}
        end = json.loads(progress["sources"][0]["endOffset"])
        taken = sum(end["limited"][p] - start.get("limited", {}).get(p, 0) for p in ("0", "1"))
        assert 0 < taken <= limit
        assert all((end["limited"][p] - everything[0][2]) % entry == 0 for p in ("0", "1"))
    assert len(batches) == 5  # 120 entries, 24 a batch
    assert output_rows(spark, tmp_path / "out") == everything


def test_pattern_picks_up_new_topics_between_batches(spark, broker, tmp_path):
    with broker.client() as client:
        client.create_topic("logs-a", 1)
        client.create_topic("other", 1)
    out = tmp_path / "out"
    with Producer(broker.tcp) as producer:
        producer.send_many("logs-a", [b"a1", b"a2"], partition=0)
        producer.send_many("other", [b"not me"], partition=0)
        query = (stream(spark, broker, subscribePattern="logs-.*", startingOffsets="earliest")
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            wait_for(lambda: query.lastProgress is not None, what="a first batch")
            with broker.client() as client:
                client.create_topic("logs-b", 2)
            producer.send_many("logs-b", [b"b1"], partition=0)
            producer.send_many("logs-b", [b"b2", b"b3"], partition=1)
            producer.send_many("logs-a", [b"a3"], partition=0)

            # every message produced, a3 included, is in a batch the query has finished
            log_ends = {topic: {str(p): o for p, o in _log_ends(broker, n, topic).items()}
                        for topic, n in (("logs-a", 1), ("logs-b", 2))}

            def offsets_reached():
                progress = query.lastProgress
                return json.loads(progress["sources"][0]["endOffset"] or "{}") == log_ends
            wait_for(offsets_reached, what="logs-a and logs-b to their ends in the query's offsets")
        finally:
            query.stop()
    values = sorted(r[4] for r in output_rows(spark, out))
    assert values == [b"a1", b"a2", b"a3", b"b1", b"b2", b"b3"]


def test_available_now_stops_at_the_log_end_it_started_with(spark, broker, tmp_path):
    import threading

    with broker.client() as client:
        client.create_topic("busy", 1)
    with Producer(broker.tcp) as producer:
        producer.send_many("busy", [f"{i:04d}".encode() * 10 for i in range(200)], partition=0)
    with broker.client() as client:
        (start_end,) = [p.log_end_offset for p in client.metadata(["busy"]).topics[0].partitions]
    stop = threading.Event()

    def keep_producing():
        # slowly, so that what came before the query fixed its end stays a few batches
        # however long Spark takes to start it (at 2,000 a second, a loaded machine's
        # slow start made a backlog of hundreds of batches)
        with Producer(broker.tcp) as producer:
            while not stop.is_set():
                producer.send_many("busy", [b"late" * 10] * 2, partition=0)
                time.sleep(0.1)
    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        run_available_now(spark, stream(spark, broker, subscribe="busy",
                                        startingOffsets="earliest", maxBytesPerTrigger="2000"),
                          tmp_path / "out", tmp_path / "cp")
    finally:
        stop.set()
        thread.join()
    got = output_rows(spark, tmp_path / "out")
    everything = topic_rows(broker.tcp, "busy", [0])
    assert got == everything[:len(got)]  # a prefix of the log, in order, nothing repeated
    assert got[-1][3] >= start_end and len(got) < len(everything)


def test_a_first_batch_run_again_never_reads_from_the_log_start(broker):
    # Spark runs an uncommitted first batch again with its checkpointed end and a
    # fresh initialOffset; with `latest` that start may lie past the end.
    from hostbroker.spark.options import read_options
    from hostbroker.spark.stream import StreamReader

    with broker.client() as client:
        client.create_topic("again", 1)
    with Producer(broker.tcp) as producer:
        producer.send_many("again", [b"x" * 10] * 10, partition=0)
        reader = StreamReader(read_options({"bootstrap": broker.tcp, "subscribe": "again"},
                                           streaming=True))
        first_end = reader.initialOffset()  # latest: the log end now
        producer.send_many("again", [b"y" * 10] * 10, partition=0)
        moved = reader.initialOffset()
        try:
            assert moved["again"]["0"] > first_end["again"]["0"]
            assert reader.partitions(moved, first_end) == []
            (rng,) = [p.range for p in reader.partitions(first_end, moved)]
            assert (rng.start, rng.end) == (first_end["again"]["0"], moved["again"]["0"])
        finally:
            reader.stop()


def test_a_narrower_subscription_keeps_the_offsets_of_what_it_drops(broker):
    from hostbroker.spark.options import read_options
    from hostbroker.spark.stream import StreamReader
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    with broker.client() as client:
        client.create_topic("keep-a", 1)
        client.create_topic("keep-b", 1)
    with Producer(broker.tcp) as producer:
        for topic in ("keep-a", "keep-b"):
            producer.send_many(topic, [b"1" * 10] * 5, partition=0)

    def reader(pattern):
        return StreamReader(read_options({"bootstrap": broker.tcp, "subscribePattern": pattern,
                                          "startingOffsets": "earliest"}, streaming=True))
    wide = reader("keep-.*")
    start = wide.initialOffset()
    end = wide.latestOffset(start, ReadAllAvailable())
    wide.stop()
    with Producer(broker.tcp) as producer:
        producer.send_many("keep-b", [b"2" * 10] * 5, partition=0)
    narrow = reader("keep-a")  # a restart with fewer topics: keep-b is not lost, only left
    later = narrow.latestOffset(end, ReadAllAvailable())
    assert later == end and narrow.partitions(end, later) == []
    narrow.stop()
    again = reader("keep-.*")
    (rng,) = [p.range for p in again.partitions(later, again.latestOffset(later,
                                                                          ReadAllAvailable()))]
    assert (rng.topic, rng.start) == ("keep-b", end["keep-b"]["0"])
    again.stop()
