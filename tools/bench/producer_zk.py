#!/usr/bin/env python3
"""What a producer that finds its brokers through ZooKeeper keeps of one given a broker list.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/producer_zk.py
    .venv/bin/python tools/bench/producer_zk.py --messages 200000 --repeats 3 --json

Three brokers (``hostbroker serve``) and a ZooKeeper (Debian's
``ZooKeeperServerMain``, tests/cluster/zkserver.py), all started here and
stopped by PID at the end. Each broker holds ``--partitions`` partitions of
the topic and is registered in ZooKeeper as docs/spec/zookeeper.md lays out
(ephemeral nodes written by this script, Unix socket and TCP listener), so
both producers see the same brokers by the same (Unix) URIs.

The same ``Producer`` settings (async, ``send(topic, value)`` per 100-byte
message without a key, acks=1) run alternately with ``zookeeper.connect`` and
with a static ``broker.list`` of the three Unix sockets, ``--repeats`` times
each, in this process; a run is timed from the first send to the end of
``flush()``. Printed: msgs/s of every run, the medians and their ratio
(zookeeper / static; the target is >= 0.9).
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
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import harness  # noqa: E402

SIZE = 100
TARGET = 0.9
MODES = ("static", "zookeeper")


def produce(mode: str, topic: str, brokers: list[harness.Broker], zk_connect: str,
            args: argparse.Namespace) -> dict:
    from hostbroker.client import Producer

    settings = {"producer.type": "async", "batch.size": args.batch_size,
                "queue.size": args.queue_size}
    if mode == "zookeeper":
        settings["zookeeper.connect"] = zk_connect
        producer = Producer(config=settings)
    else:
        producer = Producer([b.uri("unix") for b in brokers], settings)
    values = [os.urandom(SIZE // 2).hex().encode() for _ in range(1000)]
    send = producer.send
    t0 = time.perf_counter()
    for i in range(args.messages):
        send(topic, values[i % 1000])
    producer.flush()
    seconds = time.perf_counter() - t0
    stats = producer.stats
    producer.close()
    if stats["acknowledged"] != args.messages:
        raise harness.BenchError(f"{mode}: {stats['acknowledged']} of {args.messages} acknowledged")
    return {"mode": mode, "messages": args.messages, "seconds": seconds,
            "msgs_per_s": args.messages / seconds}


def register(zk, broker_id: int, broker: harness.Broker) -> None:
    from hostbroker.cluster import paths

    info = paths.BrokerInfo(broker_id, "127.0.0.1", broker.port, broker.unix_path)
    zk.create(paths.broker_path(broker_id), paths.encode_broker(info), ephemeral=True,
              makepath=True)


def register_topic(zk, broker_id: int, topic: str, partitions: int) -> None:
    from hostbroker.cluster import paths

    zk.create(paths.topic_broker_path(topic, broker_id), paths.encode_count(partitions),
              ephemeral=True, makepath=True)


def run(args: argparse.Namespace) -> dict:
    from kazoo.client import KazooClient

    from hostbroker.client import SimpleClient
    from tests.cluster.zkserver import ZooKeeperServer

    workdir = tempfile.mkdtemp(prefix="hb-bench-zk-")
    brokers: list[harness.Broker] = []
    server = zk = None
    try:
        os.mkdir(os.path.join(workdir, "zk"))
        server = ZooKeeperServer(os.path.join(workdir, "zk")).start()
        zk = KazooClient(hosts=server.connect, timeout=10)
        zk.start(timeout=10)
        for broker_id in (1, 2, 3):
            root = os.path.join(workdir, f"b{broker_id}")
            os.mkdir(root)
            broker = harness.Broker(root, [f"broker.id={broker_id}"] + args.set)
            broker.start()
            brokers.append(broker)
            register(zk, broker_id, broker)
        runs = []
        for n in range(args.repeats):
            for mode in (MODES if n % 2 == 0 else MODES[::-1]):
                topic = f"zk-bench-{mode}-{n}"
                for broker_id, broker in enumerate(brokers, 1):
                    with SimpleClient(broker.uri("unix")) as client:
                        client.create_topic(topic, args.partitions)
                    register_topic(zk, broker_id, topic, args.partitions)
                runs.append(produce(mode, topic, brokers, server.connect, args))
                harness.log(f"{mode:9} {runs[-1]['msgs_per_s']:>10.0f} msgs/s")
        median = {m: statistics.median(r["msgs_per_s"] for r in runs if r["mode"] == m)
                  for m in MODES}
        ratio = median["zookeeper"] / median["static"]
        return {"args": vars(args), "runs": runs, "median_msgs_per_s": median,
                "ratio": ratio, "target": TARGET, "met": ratio >= TARGET}
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        for broker in brokers:
            broker.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def print_report(report: dict) -> None:
    a = report["args"]
    print(f"3 brokers x {a['partitions']} partitions, {a['messages']} keyless messages of "
          f"{SIZE} B per run, acks=1; Producer: async, batch.size={a['batch_size']}, "
          f"queue.size={a['queue_size']}, send() per message")
    for r in report["runs"]:
        print(f"{r['mode']:9} {r['msgs_per_s']:>10.0f} msgs/s  ({r['seconds']:.2f} s)")
    m = report["median_msgs_per_s"]
    verdict = "met" if report["met"] else "MISSED"
    print(f"median: static {m['static']:.0f}, zookeeper {m['zookeeper']:.0f} msgs/s; "
          f"ratio {report['ratio']:.3f} (target >= {TARGET}: {verdict})")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages per run")
    ap.add_argument("--repeats", type=int, default=5, help="runs of each mode, alternated")
    ap.add_argument("--partitions", type=int, default=2, help="partitions per broker")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--queue-size", type=int, default=20000)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0 if report["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
