"""``hostbroker load`` run as a user runs it: a subprocess against a real broker.

Each run starts its own Spark JVM (``--master local[2]``); the output is read
back through the session's ``spark`` fixture, which honours the file sink's
log, and compared with what a consumer reads from the broker.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from hostbroker.client import EARLIEST, LATEST, Producer, SimpleConsumer
from hostbroker.spark.loader import one_line, parse_time

ENV = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
SUMMARY = re.compile(r"^loaded ([\d,]+) messages? \(([\d,]+) bytes?\) of (\d+) topics?, "
                     r"(\d+) partitions? in (\d+) batch(?:es)?, [\d.]+ s \(.*\) into (.+)$")
RUN_TIMEOUT = 240


def load_command(broker, path, *extra: str, topics: str = "load_.*") -> list[str]:
    return [sys.executable, "-m", "hostbroker", "load", "--bootstrap", broker.unix,
            "--topics", topics, "--to", str(path), "--master", "local[2]", *extra]


def load(broker, path, *extra: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(load_command(broker, path, *extra, **kw), env=ENV, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT)


def summary(result: subprocess.CompletedProcess) -> dict[str, int]:
    """The summary's figures but the batch count (the reader's to choose); the run must
    have ended well and said nothing of Java."""
    assert result.returncode == 0, result.stderr
    assert "\tat " not in result.stderr and "Exception" not in result.stderr, result.stderr
    (line,) = result.stdout.strip().splitlines()
    match = SUMMARY.match(line)
    assert match, line
    messages, size, topics, partitions, _, _ = match.groups()
    return {"messages": int(messages.replace(",", "")), "bytes": int(size.replace(",", "")),
            "topics": int(topics), "partitions": int(partitions)}


def refused(result: subprocess.CompletedProcess, status: int, text: str) -> None:
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("hostbroker load: ") and text in line, line
    assert result.stdout == ""


def topic_rows(broker, *topics: str) -> list[tuple]:
    """Every message of the topics as the output holds it, read with a consumer."""
    rows = []
    with SimpleConsumer(broker.unix, {"client.id": "test-loader"}) as consumer:
        for topic in topics:
            (found,) = consumer.metadata([topic]).topics
            for part in found.partitions:
                p = part.partition
                (end,) = consumer.offsets_before(topic, p, LATEST)
                (start,) = consumer.offsets_before(topic, p, EARLIEST)
                if end > start:
                    rows += [(topic, p, o, n, v) for o, n, v in
                             consumer.messages(topic, p, start, stop_at_end=True)]
    return sorted(rows)


def log_bytes(broker, *topics: str) -> int:
    with SimpleConsumer(broker.unix, {"client.id": "test-loader"}) as consumer:
        return sum(consumer.offsets_before(t, p.partition, LATEST)[0]
                   for t in topics for p in consumer.metadata([t]).topics[0].partitions)


def output_rows(spark, path) -> list[tuple]:
    frame = spark.read.parquet(str(path))
    return sorted((r.topic, r.partition, r.offset, r.next_offset, bytes(r.value))
                  for r in frame.select("topic", "partition", "offset", "next_offset",
                                        "value").collect())


def create(broker, topic: str, partitions: int) -> None:
    with broker.client() as client:
        client.create_topic(topic, partitions)


def produce(broker, topic: str, values, partitions: int = 1, **settings) -> None:
    with Producer(broker.unix, producer_type="sync", **settings) as producer:
        for i, value in enumerate(values):
            producer.send(topic, value, partition=i % partitions)


def test_two_topics_then_only_what_is_new(make_broker, spark, tmp_path):
    broker = make_broker()
    out = tmp_path / "out"
    create(broker, "load_views", 3)
    create(broker, "load_gz", 1)
    create(broker, "other", 1)
    produce(broker, "load_views", [f"view-{i}".encode() * (1 + i % 5) for i in range(30)], 3)
    with Producer(broker.unix, producer_type="async", compression_codec="gzip",
                  batch_size=8) as producer:
        producer.send_many("load_gz", [f"gz-{i}".encode() * 20 for i in range(24)])
    produce(broker, "other", [b"not loaded"])

    first = load(broker, out)
    assert summary(first) == {"messages": 54, "bytes": log_bytes(broker, "load_views", "load_gz"),
                              "topics": 2, "partitions": 4}
    assert first.stderr.startswith(f"loading 'load_.*' into {out} on local[2]\n")
    assert re.search(r"^batch \d+: 2 topics, 4 partitions, 54 messages, ", first.stderr, re.M)
    assert sorted(os.listdir(out)) == ["_checkpoint", "_spark_metadata", "topic=load_gz",
                                       "topic=load_views"]
    expected = topic_rows(broker, "load_views", "load_gz")
    assert len(expected) == 54
    assert output_rows(spark, out) == expected

    before = log_bytes(broker, "load_views", "load_gz")
    produce(broker, "load_views", [b"late-0", b"late-1"], 3)
    create(broker, "load_new", 2)
    produce(broker, "load_new", [b"new-0", b"new-1", b"new-2"], 2)
    second = load(broker, out, "--quiet")
    assert summary(second) == {
        "messages": 5, "bytes": log_bytes(broker, "load_views", "load_gz", "load_new") - before,
        "topics": 2, "partitions": 4}
    assert second.stderr == ""
    assert output_rows(spark, out) == topic_rows(broker, "load_views", "load_gz", "load_new")


def _group_alive(pgid: int) -> list[psutil.Process]:
    alive = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return alive


def test_killed_mid_run_and_run_again_holds_each_message_once(make_broker, spark, tmp_path):
    broker = make_broker()
    out = tmp_path / "out"
    create(broker, "load_kill", 2)
    produce(broker, "load_kill", [b"%03d" % i * 30 for i in range(60)], 2)
    commits = out / "_checkpoint" / "commits"
    # A JVM killed outright leaves its scratch directories behind: keep them in tmp_path.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**ENV, "TMPDIR": str(scratch), "SPARK_LOCAL_DIRS": str(scratch),
           "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={scratch}"}
    proc = subprocess.Popen(load_command(broker, out, "--max-bytes-per-trigger", "1200"),
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (commits.is_dir() and any(n.isdigit() for n in os.listdir(commits))):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no batch committed in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the loader, its JVM and the JVM's Python workers
        proc.communicate()
    deadline = time.monotonic() + 30
    while _group_alive(proc.pid):
        assert time.monotonic() < deadline, _group_alive(proc.pid)
        time.sleep(0.05)
    assert proc.returncode == -signal.SIGKILL  # it was still running
    assert any(name.startswith("blockmgr-") for name in os.listdir(scratch))

    again = load(broker, out)
    assert 0 < summary(again)["messages"] < 60  # the rest, from the last committed batch on
    expected = topic_rows(broker, "load_kill")
    assert len(expected) == 60
    assert output_rows(spark, out) == expected


def test_from_time_into_a_fresh_output_and_refusals(make_broker, spark, tmp_path):
    broker = make_broker()
    with broker.client() as client:  # segments of 4 messages
        client.create_topic("load_since", 1, {"segment.bytes": "64"})
    produce(broker, "load_since", [b"old-%02d" % i for i in range(10)])
    segments = sorted(glob.glob(os.path.join(broker.root, "logs", "load_since_0", "*.kafka")))
    assert len(segments) == 3
    for segment in segments[:-1]:  # last written in 2001
        os.utime(segment, (978307200, 978307200))
    newest = int(os.path.basename(segments[-1]).split(".")[0])
    fresh = tmp_path / "since"
    result = load(broker, fresh, "--from-time", "2005-01-01T00:00:00Z", "--format", "json")
    expected = [row for row in topic_rows(broker, "load_since") if row[2] >= newest]
    assert [row[4] for row in expected] == [b"old-08", b"old-09"]
    assert summary(result)["messages"] == 2
    frame = spark.read.schema("partition int, offset long, next_offset long, value binary, "
                              "topic string").json(str(fresh))
    assert sorted((r.topic, r.partition, r.offset, r.next_offset, bytes(r.value))
                  for r in frame.collect()) == expected

    refused(load(broker, fresh, "--from-time", "2001-01-01"), 2,
            f"--from-time needs a fresh output, and {fresh} already holds a load (from "
            "--from-time 1104537600000)")
    loaded = log_bytes(broker, "load_since")
    with broker.client() as client:  # the topic again, shorter than what was loaded
        client.delete_topic("load_since")
        client.create_topic("load_since", 1)
    produce(broker, "load_since", [b"z"])
    # The same --from-time resumes (a killed first batch must restart from that time too).
    again = load(broker, fresh, "--quiet", "--from-time", "1104537600000")
    refused(again, 1, f"DataLossError: load_since/0: offset {loaded} is past the log end "
            f"{log_bytes(broker, 'load_since')}")
    refused(load(broker, tmp_path / "x", "--from-time", "yesterday"), 2, "--from-time 'yesterday'")
    refused(load(broker, tmp_path / "x", topics="load_("), 2, "--topics 'load_(': not a regular")
    refused(load(broker, tmp_path / "x", "--property", "fetch.size=lots"), 2,
            "--property fetch.size: ")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    refused(load(broker, tmp_path / "busy"), 2, "is not a load's output")
    result = subprocess.run([*load_command(broker, tmp_path / "x"), "--format", "csv"], env=ENV,
                            text=True, capture_output=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 2 and "--format" in result.stderr
    down = subprocess.run([sys.executable, "-m", "hostbroker", "load", "--bootstrap",
                           "tcp://127.0.0.1:1", "--topics", "t", "--to", str(tmp_path / "x")],
                          env=ENV, text=True, capture_output=True, timeout=RUN_TIMEOUT)
    refused(down, 1, "cannot reach the broker at tcp://127.0.0.1:1")
    assert not (tmp_path / "x").exists()


def test_times_and_spark_errors_in_one_line():
    assert parse_time("1700000000000") == 1700000000000
    assert parse_time("2026-11-26") == parse_time("2026-11-26T00:00:00+00:00") == 1795651200000
    assert parse_time("2026-11-26T01:00:00+01:00") == 1795651200000
    with pytest.raises(ValueError, match="neither milliseconds"):
        parse_time("noon")
    text = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
            "[PYTHON_DATA_SOURCE_ERROR] Failed: Traceback (most recent call last):\n"
            '  File "x.py", line 1, in f\n'
            "hostbroker.client.errors.OffsetOutOfRangeError: t/0: offset 12 is before the log "
            "start 40\n\nDuring handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\nUnboundLocalError: reader\n SQLSTATE: 38000")
    assert one_line(text) == ("OffsetOutOfRangeError: t/0: offset 12 is before the log start 40",
                              False)
    option = "...OptionError: hostbroker data source: option maxBytesPerTrigger: 0 must be\n"
    assert one_line(option) == ("hostbroker data source: option maxBytesPerTrigger: 0 must be",
                                True)
    assert one_line("org.apache.spark.SparkException: [X_Y] it broke\n\tat a.b(c)") == (
        "it broke", False)
    # A task's error that names the broker needs no class name in front.
    refused = ("[STREAM_FAILED] Query terminated with exception: [PYTHON_DATA_SOURCE_ERROR] "
               "Failed: Traceback (most recent call last):\n  File \"arrow.py\", line 9, in f\n"
               "ConnectionRefusedError: cannot reach tcp://127.0.0.1:1: [Errno 111] Connection "
               "refused\n SQLSTATE: 38000")
    assert one_line(refused) == ("cannot reach tcp://127.0.0.1:1: [Errno 111] Connection refused",
                                 False)
