#!/usr/bin/env python3
"""How fast does Spark read through the ``hostbroker`` data source, against its own text reader?

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/spark_read.py
    .venv/bin/python tools/bench/spark_read.py --messages 200000 --rounds 3 --master local[2]

One broker (``hostbroker serve`` in a temp dir, stopped by PID at the end),
one topic of ``--partitions`` partitions holding ``--messages`` values of
``--size`` bytes (produced in sets of 1,000, no compression), and a text file
of the same values, one per line. Each round, on one warm SparkSession, runs
the same query (``count()`` and ``sum(length(value))``, checked against what
was produced) over three inputs, in turn:

1. **text**: ``spark.read.text(file)``, the baseline;
2. **hostbroker**: ``spark.read.format("hostbroker")`` on the topic;
3. **arrow-floor**: a Python data source that only yields prebuilt Arrow
   batches of the same shape (no fetching, no decoding): what Spark's Python
   worker costs by itself.

Prints rows/s of each and the ratios hostbroker / text and hostbroker /
arrow-floor per round, then the median of each ratio. ``--profile`` also times
the read path alone, outside Spark, in this process (fetch, decode, Arrow),
to show where a task's Python time goes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Broker  # noqa: E402


def produce(uri: str, topic: str, partitions: int, messages: int, size: int) -> list[bytes]:
    from hostbroker.client import Producer

    values = [(b"%0*d" % (size, i)) for i in range(messages)]
    with Producer(uri, max_request_bytes=4 * 1024 * 1024) as producer:
        for start in range(0, messages, 1000):
            producer.send_many(topic, values[start:start + 1000],
                               partition=(start // 1000) % partitions)
    return values


def topic_and_text(uri: str, workdir: str, partitions: int, messages: int, size: int) -> str:
    """Topic ``bench`` of ``partitions`` holding the values, and a text file of them (its path)."""
    from hostbroker.client import SimpleClient

    with SimpleClient(uri) as client:
        client.create_topic("bench", partitions)
    values = produce(uri, "bench", partitions, messages, size)
    text = os.path.join(workdir, "values.txt")
    with open(text, "wb") as f:
        f.write(b"\n".join(values) + b"\n")
    return text


def floor_source(partitions: int, messages: int, size: int):
    """A data source class yielding constant Arrow batches of the hostbroker schema."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Part(InputPartition):
        def __init__(self, index):
            super().__init__(index)
            self.index = index

    class Reader(DataSourceReader):
        def partitions(self):
            return [Part(i) for i in range(partitions)]

        def read(self, part):
            import pyarrow as pa

            from hostbroker.spark.arrow import ARROW_SCHEMA
            rows = 9000
            offsets = pa.array(range(rows), pa.int64())
            batch = pa.RecordBatch.from_arrays(
                [pa.repeat(pa.scalar("bench"), rows), pa.repeat(pa.scalar(part.index, pa.int32()),
                                                                 rows),
                 offsets, offsets, pa.array([b"x" * size] * rows, pa.binary())],
                schema=ARROW_SCHEMA)
            left = messages // partitions + (part.index < messages % partitions)
            while left > 0:
                yield batch.slice(0, min(rows, left))
                left -= rows

    class Floor(DataSource):
        @classmethod
        def name(cls):
            return "arrowfloor"

        def schema(self):
            from hostbroker.spark.source import SCHEMA
            return SCHEMA

        def reader(self, schema):
            return Reader()

    return Floor


def timed(df, want_rows: int, want_bytes: int) -> float:
    from pyspark.sql import functions as F

    start = time.perf_counter()
    (row,) = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()
    took = time.perf_counter() - start
    if (row["n"], row["b"]) != (want_rows, want_bytes):
        raise SystemExit(f"wrong answer: {row['n']} rows, {row['b']} bytes; "
                         f"want {want_rows}, {want_bytes}")
    return took


def profile(uri: str, topic: str, partitions: int) -> None:
    """The read path alone, in this process: fetch only, then fetch + decode + Arrow."""
    from hostbroker.client import SimpleConsumer
    from hostbroker.spark.arrow import read_range
    from hostbroker.spark.options import read_options
    from hostbroker.spark.planning import Planner

    opts = read_options({"bootstrap": uri, "subscribe": topic}, streaming=False)
    with Planner(opts) as planner:
        ranges = planner.plan()
    start = time.perf_counter()
    total = 0
    with SimpleConsumer(uri) as consumer:
        for rng in ranges:
            pos = rng.start
            while pos < rng.end:
                fetched = consumer.fetch(rng.topic, rng.partition, pos,
                                         min(1024 * 1024, rng.end - pos))
                total += len(fetched.message_set)
                pos = fetched.next_offset
    fetch = time.perf_counter() - start
    times = {}
    for crcs in (False, True):
        client = {**opts.client, "check.crcs": crcs}
        start = time.perf_counter()
        rows = sum(b.num_rows for rng in ranges for b in read_range(rng, client, True))
        times[crcs] = time.perf_counter() - start
    print(f"profile, in one process, {rows} rows: fetch only {fetch / rows * 1e9:.0f} ns/row "
          f"({total / fetch / 1e6:.0f} MB/s); fetch + decode + Arrow "
          f"{times[False] / rows * 1e9:.0f} ns/row without CRC checks, "
          f"{times[True] / rows * 1e9:.0f} ns/row with them ({rows / times[True]:,.0f} rows/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option for the hostbroker reads (hostbroker.fetch.size=4194304)")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="hb-spark-read-")
    broker = Broker(workdir, ["num.processors=2", "num.handlers=2"])
    try:
        broker.start()
        uri = broker.uri("tcp")
        text = topic_and_text(uri, workdir, args.partitions, args.messages, args.size)
        want = (args.messages, args.messages * args.size)
        extra = dict(item.split("=", 1) for item in args.option)
        if args.profile:
            profile(uri, "bench", args.partitions)

        from hostbroker.spark.session import spark_session
        spark = spark_session(args.master, "hostbroker-bench-read")
        spark.dataSource.register(floor_source(args.partitions, args.messages, args.size))
        inputs = {
            "text": lambda: spark.read.text(text),
            "hostbroker": lambda: (spark.read.format("hostbroker").option("bootstrap", uri)
                                   .option("subscribe", "bench").options(**extra).load()),
            "arrow-floor": lambda: spark.read.format("arrowfloor").load(),
        }
        for make in inputs.values():  # warm-up: JVM, Python workers, the broker's cache
            timed(make(), *want)
        ratios_text, ratios_floor = [], []
        print(f"{args.messages:,} messages of {args.size} B in {args.partitions} partitions, "
              f"master {args.master}, {os.cpu_count()} cores")
        for rnd in range(args.rounds):
            rates = {name: args.messages / timed(make(), *want) for name, make in inputs.items()}
            ratios_text.append(rates["hostbroker"] / rates["text"])
            ratios_floor.append(rates["hostbroker"] / rates["arrow-floor"])
            print(f"round {rnd + 1}: " + ", ".join(f"{n} {r:,.0f} rows/s" for n, r in rates.items())
                  + f"; hostbroker/text {ratios_text[-1]:.2f}, "
                    f"hostbroker/arrow-floor {ratios_floor[-1]:.2f}")
        print(f"median hostbroker/text {statistics.median(ratios_text):.2f}, "
              f"hostbroker/arrow-floor {statistics.median(ratios_floor):.2f}")
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
