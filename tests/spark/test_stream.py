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


def _log_ends(broker, partitions):
    with broker.client() as client:
        meta = client.metadata(["events"])
    return {p.partition: p.log_end_offset for p in meta.topics[0].partitions}
