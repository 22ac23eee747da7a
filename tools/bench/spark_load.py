#!/usr/bin/env python3
"""``hostbroker load`` end to end, next to Spark copying the same payloads from a text file.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/spark_load.py
    .venv/bin/python tools/bench/spark_load.py --messages 200000 --rounds 2 --master local[2]

One broker (``hostbroker serve`` in a temp dir, stopped by PID at the end),
one topic of ``--partitions`` partitions holding ``--messages`` values of
``--size`` bytes, and a text file of the same values, one per line. Each
round runs, as separate commands the way a user would, each with its own
JVM:

1. **load**: ``hostbroker load --topics bench --to OUT --format parquet``
   into a fresh directory (its summary line gives the query's own seconds);
2. **text**: a Spark job that does ``spark.read.text(FILE).write.parquet(OUT)``
   (this script with ``--copy-text``), which prints its job's seconds.

Both outputs are checked (row counts). Prints, per round, messages/s of each
over the whole command (JVM start included) and over the job alone, and the
ratios load / text.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def copy_text(path: str, out: str, master: str) -> None:
    """The baseline job, in its own process: text file to Parquet; prints its seconds."""
    from hostbroker.spark.session import spark_session

    spark = spark_session(master, "hostbroker-bench-copy")
    start = time.perf_counter()
    spark.read.text(path).write.parquet(out)
    took = time.perf_counter() - start
    rows = spark.read.parquet(out).count()
    print(f"copied {rows} rows in {took:.3f} s")
    spark.stop()


def env() -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


def run_load(uri: str, out: str, master: str) -> tuple[float, float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hostbroker", "load", "--bootstrap", uri,
                           "--topics", "bench", "--to", out, "--master", master, "--quiet"],
                          capture_output=True, text=True, env=env(), check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"load failed ({done.returncode}): {done.stderr.strip()}")
    found = re.search(r"loaded ([\d,]+) messages .* in [\d,]+ batch(?:es)?, ([\d.]+) s",
                      done.stdout)
    if not found:
        raise SystemExit(f"no summary in: {done.stdout!r}")
    return wall, float(found.group(2)), int(found.group(1).replace(",", ""))


def run_copy(path: str, out: str, master: str) -> tuple[float, float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--copy-text", path, out, "--master", master],
                          capture_output=True, text=True, env=env(), check=False)
    wall = time.perf_counter() - start
    found = re.search(r"copied (\d+) rows in ([\d.]+) s", done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"copy failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall, float(found.group(2)), int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--copy-text", nargs=2, metavar=("FILE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.copy_text:
        copy_text(*args.copy_text, args.master)
        return

    from harness import Broker
    from spark_read import topic_and_text

    workdir = tempfile.mkdtemp(prefix="hb-spark-load-")
    broker = Broker(workdir, ["num.processors=2", "num.handlers=2"])
    try:
        broker.start()
        uri = broker.uri("tcp")
        text = topic_and_text(uri, workdir, args.partitions, args.messages, args.size)
        print(f"{args.messages:,} messages of {args.size} B in {args.partitions} partitions, "
              f"master {args.master}, {os.cpu_count()} cores")
        wall_ratios, job_ratios = [], []
        for rnd in range(args.rounds):
            out = os.path.join(workdir, f"round{rnd}")
            load_wall, load_job, loaded = run_load(uri, out + "-load", args.master)
            copy_wall, copy_job, copied = run_copy(text, out + "-text", args.master)
            if loaded != args.messages or copied != args.messages:
                raise SystemExit(f"loaded {loaded}, copied {copied}, want {args.messages}")
            n = args.messages
            wall_ratios.append(copy_wall / load_wall)
            job_ratios.append(copy_job / load_job)
            print(f"round {rnd + 1}: load {n / load_wall:,.0f} msg/s whole command "
                  f"({load_wall:.1f} s), {n / load_job:,.0f} msg/s query ({load_job:.1f} s); "
                  f"text copy {n / copy_wall:,.0f} msg/s whole command ({copy_wall:.1f} s), "
                  f"{n / copy_job:,.0f} msg/s job ({copy_job:.1f} s); "
                  f"load/text {wall_ratios[-1]:.2f} whole, {job_ratios[-1]:.2f} job")
            shutil.rmtree(out + "-load", ignore_errors=True)
            shutil.rmtree(out + "-text", ignore_errors=True)
        print(f"median load/text {statistics.median(wall_ratios):.2f} whole command, "
              f"{statistics.median(job_ratios):.2f} job alone")
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
