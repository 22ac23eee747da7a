#!/usr/bin/env python3
"""What the public producer API keeps of the broker's raw produce throughput.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/producer_api.py
    .venv/bin/python tools/bench/producer_api.py --uri-kind both --repeats 3 --json

One broker (``hostbroker serve``, default settings, started here and
stopped by PID at the end), one topic of one partition per run, 100-byte
messages, acks=1, each producer in its own process:

1. **raw**: prebuilt message sets of 1000 messages pipelined over
   ``BrokerConnection`` with 16 requests in flight: ``role_producer`` of
   ``broker_throughput.py``, the broker benchmark's own producer;
2. **send**: ``hostbroker.client.Producer`` with ``producer.type=async``,
   one ``send(topic, value)`` per message, then ``flush()``;
3. **send_many**: the same producer, ``send_many(topic, values)`` with
   ``batch.size`` values per call, then ``flush()``;
4. **encoding** (for reference, no target): raw, except that each message
   set is encoded with ``encode_message_set`` (every CRC computed) while
   timed, as any producer must: what is left of raw once the client pays
   for its own message sets.

Each is timed from its first send to its last acknowledgement and printed in
messages/s with its ratio to raw; the target is >= 0.7 for both API runs.
The runs are interleaved (raw, encoding, send, send_many, raw, ...) ``--repeats``
times; the ratio is taken between medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import broker_throughput  # noqa: E402
import compare  # noqa: E402
import harness  # noqa: E402

SIZE = 100
TARGET = 0.7
MODES = ("raw", "encoding", "send", "send_many")


def role_api_producer(p: dict) -> None:
    """``Producer`` in async mode: ``send()`` per message or ``send_many()`` per batch."""
    from hostbroker.client import Producer

    count, topic, batch = p["messages"], p["topic"], p["batch_size"]
    pool = compare.payloads(SIZE)
    producer = Producer(p["uri"], {"producer.type": "async", "batch.size": batch,
                                   "queue.size": p["queue_size"]})
    if p["mode"] == "send_many":
        chunks = [pool[i:i + batch] for i in range(0, len(pool), batch)]
        chunks = [c for c in chunks if len(c) == batch] or [pool[:batch]]
    harness.handshake()
    deadline = time.monotonic() + p["max_seconds"]
    t0 = time.perf_counter()
    sent = 0
    if p["mode"] == "send":
        send = producer.send
        while sent < count and time.monotonic() < deadline:
            for i in range(sent, min(count, sent + batch)):
                send(topic, pool[i % len(pool)])
            sent = min(count, sent + batch)
    else:
        send_many = producer.send_many
        while sent < count and time.monotonic() < deadline:
            chunk = chunks[(sent // batch) % len(chunks)][:count - sent]
            send_many(topic, chunk)
            sent += len(chunk)
    producer.flush()
    seconds = time.perf_counter() - t0
    producer.close()
    harness.emit({"messages": sent, "seconds": seconds, "capped": sent < count})


def role_encoding_producer(p: dict) -> None:
    """Like raw, but every message set is encoded (CRCs computed) while timed."""
    from hostbroker.client import BrokerConnection
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol import api

    count, topic, batch = p["messages"], p["topic"], p["batch_size"]
    pool = compare.payloads(SIZE)
    chunks = [pool[i:i + batch] for i in range(0, len(pool) - batch + 1, batch)] or [pool]
    conn = BrokerConnection(p["uri"], client_id="hb-bench-encoding").connect()
    harness.handshake()
    deadline = time.monotonic() + p["max_seconds"]
    t0 = time.perf_counter()
    sent = 0
    while True:
        while sent < count and conn.pending < 16 and time.monotonic() < deadline:
            values = chunks[(sent // batch) % len(chunks)][:count - sent]
            conn.send(api.ProduceRequest(1, 30_000, (
                api.ProducePartition(topic, 0, encode_message_set(values)),)))
            sent += len(values)
        if not conn.pending:
            break
        result = conn.receive().partitions[0]
        if result.error_code != 0:
            raise harness.BenchError(f"produce answered {result!r}")
    seconds = time.perf_counter() - t0
    conn.close()
    harness.emit({"messages": sent, "seconds": seconds, "capped": sent < count})


ROLES = {"api": role_api_producer, "encoding": role_encoding_producer}


def run(broker: harness.Broker, kind: str, mode: str, n: int, args: argparse.Namespace,
        workdir: str) -> dict:
    from hostbroker.client import SimpleClient

    uri = broker.uri(kind)
    topic = f"api-{kind}-{mode}-{n}"
    with SimpleClient(uri) as client:
        client.create_topic(topic, 1)
    if mode == "raw":
        params = {"uri": uri, "topic": topic, "message_bytes": SIZE, "batch": args.batch_size,
                  "messages": args.messages, "in_flight": 16, "distinct_sets": 8,
                  "max_seconds": args.max_seconds}
        child = harness.Child(broker_throughput.SCRIPT, "producer", params, workdir,
                              timeout=args.max_seconds + 120)
    else:
        params = {"uri": uri, "topic": topic, "mode": mode, "messages": args.messages,
                  "batch_size": args.batch_size, "queue_size": args.queue_size,
                  "max_seconds": args.max_seconds}
        role = "encoding" if mode == "encoding" else "api"
        child = harness.Child(os.path.abspath(__file__), role, params, workdir,
                              timeout=args.max_seconds + 120)
    try:
        child.ready()
        busy = harness.wait_quiet(args.wait_quiet) if args.wait_quiet else None
        cpu0 = harness.cpu_seconds(broker.worker_pids)
        child.go()
        result = child.result()
        cpu1 = harness.cpu_seconds(broker.worker_pids)
    finally:
        child.end()
    broker_cpu = sum(cpu1[n] - cpu0[n] for n in cpu1 if n in cpu0)
    result.update(mode=mode, socket=kind, machine_busy_before=busy,
                  msgs_per_s=result["messages"] / result["seconds"],
                  client_cpu_percent=result["cpu_seconds"] / result["seconds"] * 100,
                  broker_cpu_percent=broker_cpu / result["seconds"] * 100,
                  cpu_us_per_message={"client": result["cpu_seconds"] / result["messages"] * 1e6,
                                      "broker": broker_cpu / result["messages"] * 1e6})
    return result


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    for kind in dict.fromkeys(r["socket"] for r in runs):
        median = {m: statistics.median(r["msgs_per_s"] for r in runs
                                       if r["socket"] == kind and r["mode"] == m)
                  for m in MODES}
        for mode in MODES:
            ratio = median[mode] / median["raw"]
            rows.append({"socket": kind, "mode": mode, "median_msgs_per_s": median[mode],
                         "ratio_to_raw": ratio,
                         "met": None if mode in ("raw", "encoding") else ratio >= TARGET})
    return rows


def print_report(report: dict) -> None:
    m = report["machine"]
    a = report["args"]
    print(f"machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB, "
          f"Linux {m['kernel']}, Python {m['python']}, hostbroker {m['git']}")
    print(f"{a['messages']} messages of {SIZE} B per run, acks=1, one partition; Producer: "
          f"producer.type=async, batch.size={a['batch_size']}, queue.size={a['queue_size']}")
    print()
    print(f"{'socket':6} {'run':10} {'msgs/s':>10}  CPU % client, broker;"
          f" CPU µs/message client, broker")
    for r in report["runs"]:
        busy = r["machine_busy_before"]
        notes = " NOISY" if busy is not None and busy >= 0.15 else ""
        notes += " CAPPED" if r["capped"] else ""
        us = r["cpu_us_per_message"]
        print(f"{r['socket']:6} {r['mode']:10} {r['msgs_per_s']:>10.0f}  "
              f"{r['client_cpu_percent']:>3.0f}, {r['broker_cpu_percent']:>3.0f};  "
              f"{us['client']:.2f}, {us['broker']:.2f}{notes}")
    print()
    print(f"{'socket':6} {'run':10} {'median msgs/s':>14} {'/ raw':>6}  target")
    for row in report["summary"]:
        goal = "" if row["met"] is None else f">= {TARGET} " + ("met" if row["met"] else "MISSED")
        print(f"{row['socket']:6} {row['mode']:10} {row['median_msgs_per_s']:>14.0f} "
              f"{row['ratio_to_raw']:>6.2f}  {goal}")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uri-kind", choices=("unix", "tcp", "both"), default="unix",
                    help="socket the producers use (default unix)")
    ap.add_argument("--messages", type=int, default=1_000_000,
                    help="100-byte messages per run (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=2,
                    help="interleaved rounds of the three runs (default 2)")
    ap.add_argument("--batch-size", type=int, default=1000,
                    help="messages per produce request: the raw sets and the Producer's "
                         "batch.size (default 1000)")
    ap.add_argument("--queue-size", type=int, default=100_000,
                    help="the Producer's queue.size (default 100,000)")
    ap.add_argument("--max-seconds", type=float, default=60, help="cap on each run (default 60)")
    compare.add_common_options(ap)
    args = ap.parse_args(argv)
    if args.messages < args.batch_size or args.batch_size < 1 or args.repeats < 1:
        ap.error("--messages must be at least --batch-size, which must be at least 1; "
                 "--repeats at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.params))
        return 0
    compare.stop_on_sigterm()
    workdir = tempfile.mkdtemp(prefix="hb-producer-api-")
    kinds = ["unix", "tcp"] if args.uri_kind == "both" else [args.uri_kind]
    report = dict(compare.new_report(args), runs=[])
    broker = harness.Broker(workdir, args.set)
    try:
        harness.log(f"starting hostbroker serve in {workdir} ...")
        broker.start()
        harness.warm_up(broker)
        for n in range(args.repeats):
            for kind in kinds:
                for mode in MODES:
                    harness.log(f"[{kind}] {mode} #{n + 1}: {args.messages} messages ...")
                    report["runs"].append(run(broker, kind, mode, n, args, workdir))
    finally:
        report["broker_exit_code"] = broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report["summary"] = summarize(report["runs"])
    harness.output(report, args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
