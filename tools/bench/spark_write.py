#!/usr/bin/env python3
"""How much of the client producer's throughput does ``df.write.format("hostbroker")`` keep?

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/spark_write.py
    .venv/bin/python tools/bench/spark_write.py --messages 200000 --master local[2]

One broker (``hostbroker serve`` in a temp dir, default settings but for the
test harness's listeners and small ring, started here and stopped by PID at
the end), one topic of ``--partitions`` partitions per run, 100-byte values,
acks=1, no compression:

1. **spark**: ``spark.range(N)`` with a 100-byte string ``value`` column
   (a constant prefix and the zero-padded id), written with
   ``df.write.format("hostbroker")``: one synchronous producer per task, as
   many tasks as the master has cores. Timed from ``save()`` to its return
   (planning, the job and its commit), after one small warm-up write.
2. **raw**: ``hostbroker.client.Producer`` with the writer's settings
   (``hostbroker.spark.writer.producer_config``: async, ``batch.size``
   10,000, acks=1), ``send_many`` of 10,000 values per call (Spark's Arrow
   batch), then ``close()``, in as many processes as the spark run had
   tasks, each sending its share; timed from the first process's start to
   the last one's end. Values are built before the clock starts.

Each run's topic is checked afterwards: its log holds exactly N entries of
100-byte values (the sum of the partitions' log ends). Prints messages/s of
each and the ratio spark / raw.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from hostbroker.client import Producer, SimpleClient  # noqa: E402
from hostbroker.client.producer_batches import ENTRY_OVERHEAD  # noqa: E402
from hostbroker.protocol import api  # noqa: E402
from tests.integration.broker import Broker  # noqa: E402

SIZE = 100
CHUNK = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch's default
PREFIX = "x" * (SIZE - 10)


def value(i: int) -> bytes:
    return f"{PREFIX}{i:010d}".encode()


def raw_producer(uri: str, topic: str, start: int, stop: int, ready, go) -> None:
    from hostbroker.spark.options import write_options
    from hostbroker.spark.writer import producer_config

    values = [value(i) for i in range(start, stop)]
    config = producer_config(write_options({"bootstrap": uri, "topic": topic}, streaming=False))
    with Producer(uri, config) as producer:
        ready.set()
        go.wait()
        for i in range(0, len(values), CHUNK):
            producer.send_many(topic, values[i:i + CHUNK])


def run_raw(uri: str, topic: str, count: int, procs: int) -> float:
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    share = -(-count // procs)
    workers, readies = [], []
    for n in range(procs):
        ready = ctx.Event()
        p = ctx.Process(target=raw_producer, args=(uri, topic, n * share,
                                                   min(count, (n + 1) * share), ready, go))
        p.start()
        workers.append(p)
        readies.append(ready)
    for ready in readies:
        if not ready.wait(120):
            raise RuntimeError("a raw producer process did not start")
    t0 = time.perf_counter()
    go.set()
    for p in workers:
        p.join(600)
        if p.exitcode != 0:
            raise RuntimeError(f"raw producer {p.pid} exited with {p.exitcode}")
    return time.perf_counter() - t0


def spark_frame(spark, count: int, tasks: int):
    from pyspark.sql import functions as F

    return spark.range(0, count, 1, tasks).select(
        F.concat(F.lit(PREFIX), F.lpad(F.col("id").cast("string"), 10, "0")).alias("value"))


def run_spark(spark, uri: str, topic: str, count: int, tasks: int) -> float:
    writer = (spark_frame(spark, count, tasks).write.format("hostbroker").mode("append")
              .option("bootstrap", uri).option("topic", topic))
    t0 = time.perf_counter()
    writer.save()
    return time.perf_counter() - t0


def check(uri: str, topic: str, partitions: int, count: int) -> None:
    with SimpleClient(uri) as client:
        total = sum(client.offsets(topic, p, api.LATEST_TIME)[0] for p in range(partitions))
    if total != count * (SIZE + ENTRY_OVERHEAD):
        raise RuntimeError(f"{topic}: {total} log bytes, expected "
                           f"{count * (SIZE + ENTRY_OVERHEAD)} ({count} messages)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from hostbroker.spark.session import spark_session

    root = tempfile.mkdtemp(prefix="hb-spark-write-")
    broker = Broker(root).start()
    try:
        uri = broker.unix
        with SimpleClient(uri) as client:
            for topic in ("warmup", "spark", "raw"):
                client.create_topic(topic, args.partitions)
        spark = spark_session(args.master, app_name="spark-write-bench")
        tasks = spark.sparkContext.defaultParallelism
        run_spark(spark, uri, "warmup", 20_000, tasks)
        spark_s = run_spark(spark, uri, "spark", args.messages, tasks)
        check(uri, "spark", args.partitions, args.messages)
        spark.stop()
        raw_s = run_raw(uri, "raw", args.messages, tasks)
        check(uri, "raw", args.partitions, args.messages)
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    spark_rate, raw_rate = args.messages / spark_s, args.messages / raw_s
    print(f"{args.messages} messages of {SIZE} bytes, {args.partitions} partitions, "
          f"{tasks} tasks / processes, {os.cpu_count()} cores")
    print(f"spark  {spark_s:8.2f} s  {spark_rate:12,.0f} msgs/s")
    print(f"raw    {raw_s:8.2f} s  {raw_rate:12,.0f} msgs/s")
    print(f"ratio spark/raw {spark_rate / raw_rate:.2f}")


if __name__ == "__main__":
    main()
