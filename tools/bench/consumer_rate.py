#!/usr/bin/env python3
"""The high-level consumer's read rate against SimpleConsumer's, same run.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/consumer_rate.py
    .venv/bin/python tools/bench/consumer_rate.py --messages 300000 --rounds 2
    .venv/bin/python tools/bench/consumer_rate.py --set fetch.size=4194304

One ``hostbroker serve`` on a scratch directory (``harness.Broker``, every
broker setting at its default), stopped by PID at the end. Two topics are
filled first with ``--messages`` messages of 100 bytes each, produced in
sets of 1,000: one with 1 partition and one with 12 (the messages spread
evenly over them).

Then, per topic, ``--rounds`` pairs of reads alternate, A B A B: A is a
:class:`SimpleConsumer` walking each partition from offset 0 to its end
(``messages(..., stop_at_end=True)``, the next fetch pipelined), B a
:class:`ConsumerConnector` of a new group (``auto.offset.reset=earliest``,
one stream over the whole topic, every other setting at its default)
reading until it has handed out every message. Each read runs in a process
of its own, set up (imported, constructed) before it is told to go; its
time runs from "go" to its last message, so B's includes joining the group.
Both loops do the same with each message: count it and add the length of
its value. ``--set KEY=VALUE`` gives both consumers a client setting.

Printed: msgs/s of A and B and B/A per pair, and the median B/A per topic;
beside it the same ratio by CPU seconds (A's over B's, the reader process's
from "go" to its last message), which a machine shared with other work
disturbs less than the wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import harness  # noqa: E402

SIZE = 100
BATCH = 1000
TOPICS = {"rate-1": 1, "rate-12": 12}


# ---------------------------------------------------------------------------
# The readers, each in a process of its own.

def read_simple(params: dict) -> dict:
    from hostbroker.client import SimpleConsumer

    topic, partitions = params["topic"], params["partitions"]
    consumer = SimpleConsumer(params["uri"], params["settings"])
    harness.handshake()
    t0 = time.perf_counter()
    count = nbytes = 0
    for partition in range(partitions):
        for _offset, _next_offset, value in consumer.messages(topic, partition, 0,
                                                              stop_at_end=True):
            count += 1
            nbytes += len(value)
    seconds = time.perf_counter() - t0
    consumer.close()
    return {"count": count, "bytes": nbytes, "seconds": seconds}


def read_group(params: dict) -> dict:
    from hostbroker.client import ConsumerConnector

    topic, total = params["topic"], params["messages"]
    settings = {"group.id": params["group"], "auto.offset.reset": "earliest",
                "consumer.timeout.ms": 30000, **params["settings"]}
    connector = ConsumerConnector(params["uri"], settings)
    harness.handshake()
    t0 = time.perf_counter()
    (stream,) = connector.create_message_streams({topic: 1})[topic]
    joined = time.perf_counter() - t0
    count = nbytes = 0
    for message in stream:
        count += 1
        nbytes += len(message.value)
        if count == total:
            break
    seconds = time.perf_counter() - t0
    connector.shutdown()
    return {"count": count, "bytes": nbytes, "seconds": seconds, "join_seconds": joined}


ROLES = {"simple": read_simple, "group": read_group}


# ---------------------------------------------------------------------------
# The orchestrating side.

def fill(uri: str, messages: int) -> None:
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    payloads = [os.urandom(SIZE // 2).hex().encode() for _ in range(BATCH)]
    with SimpleClient(uri) as client:
        for topic, partitions in TOPICS.items():
            client.create_topic(topic, partitions)
            t0 = time.perf_counter()
            for partition in range(partitions):
                share = messages // partitions + (partition < messages % partitions)
                while share > 0:
                    n = min(BATCH, share)
                    client.produce(topic, partition, encode_message_set(payloads[:n]))
                    share -= n
            harness.log(f"{topic}: {messages:,} x {SIZE} B in {partitions} partition(s), "
                        f"produced in {time.perf_counter() - t0:.1f} s")


def read(role: str, params: dict, workdir: str, timeout: float) -> dict:
    child = harness.Child(__file__, role, params, workdir, timeout)
    try:
        child.ready()
        child.go()
        result = child.result()
    finally:
        child.end()
    if result["count"] != params["messages"]:
        raise harness.BenchError(f"{role} read {result['count']:,} of {params['messages']:,}")
    result["msgs_s"] = result["count"] / result["seconds"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000,
                        help="messages per topic (default 1,000,000; at most 5,000,000)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="A B pairs per topic (default 5; at most 10)")
    parser.add_argument("--topics", default="1,12",
                        help="partition counts to read, of 1 and 12 (default both)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a client setting for both consumers (repeatable)")
    parser.add_argument("--transport", choices=("unix", "tcp"), default="unix")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one read may take before it is ended (default 120)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("params", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        harness.emit(ROLES[args.role](json.loads(args.params)))
        return
    if not 1 <= args.messages <= 5_000_000 or not 1 <= args.rounds <= 10:
        raise SystemExit("--messages must be 1 to 5,000,000 and --rounds 1 to 10")
    settings = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set wants KEY=VALUE, not {item!r}")
        settings[key.strip()] = value.strip()
    wanted = {int(n) for n in args.topics.split(",")}
    topics = {t: n for t, n in TOPICS.items() if n in wanted}
    if not topics:
        raise SystemExit(f"--topics: one of {sorted(TOPICS.values())}")

    print(json.dumps(harness.machine_info()))
    if settings:
        print(f"client settings (both consumers): {settings}")
    with tempfile.TemporaryDirectory(prefix="hb-consumer-rate-") as workdir, ExitStack() as undo:
        broker = harness.Broker(workdir, [])
        undo.callback(broker.stop)
        broker.start()
        uri = broker.uri(args.transport)
        fill(uri, args.messages)
        for topic, partitions in topics.items():
            ratios, cpu_ratios = [], []
            for n in range(args.rounds):
                params = {"uri": uri, "topic": topic, "partitions": partitions,
                          "messages": args.messages, "settings": settings}
                a = read("simple", params, workdir, args.timeout)
                b = read("group", {**params, "group": f"rate-{partitions}-{n}"}, workdir,
                         args.timeout)
                ratios.append(b["msgs_s"] / a["msgs_s"])
                cpu_ratios.append(a["cpu_seconds"] / b["cpu_seconds"])
                print(f"{partitions:>2} partition(s), round {n + 1}: SimpleConsumer "
                      f"{a['msgs_s']:>9,.0f} msgs/s ({a['cpu_seconds']:.2f} CPU s), "
                      f"ConsumerConnector {b['msgs_s']:>9,.0f} msgs/s "
                      f"({b['cpu_seconds']:.2f} CPU s, join {b['join_seconds'] * 1000:.0f} ms)"
                      f", ratio {ratios[-1]:.2f} (CPU {cpu_ratios[-1]:.2f}), "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            print(f"{partitions:>2} partition(s): median ratio {statistics.median(ratios):.2f} "
                  f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}); by CPU seconds "
                  f"{statistics.median(cpu_ratios):.2f}", flush=True)


if __name__ == "__main__":
    main()
