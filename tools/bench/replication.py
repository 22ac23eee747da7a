#!/usr/bin/env python3
"""What does replication cost and how fast does it recover? Produce rate by replication factor
and acks, the failover gap, a controlled shutdown's errors, and a follower's catch-up rate.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/replication.py                 # everything, defaults
    .venv/bin/python tools/bench/replication.py --only produce --messages 300000 --repeats 3
    .venv/bin/python tools/bench/replication.py --only catchup --catchup-mb 1024 --json

Three brokers (``hostbroker serve``, default settings but ``broker.id`` and listeners) and a
ZooKeeper (Debian's ``ZooKeeperServerMain``, tests/cluster/zkserver.py) are started here
and stopped by PID at the end; topics are made with ``hostbroker topics create
--zookeeper ... --replication-factor R``.

- ``produce``: 100-byte messages from one async :class:`~hostbroker.client.Producer`
  (through ZooKeeper, following leaders) to a topic of 3 partitions, for replication
  factor 1, 2, 3 and acks 1 and -1, in turns ``--repeats`` times (a new topic each run).
  Ratios are against RF 1 acks=1 of the same run; the target is RF 3 acks=-1 >= 0.5.
  ``--producer-set KEY=VALUE`` changes a producer setting for this part (a tuned run,
  to be labelled so), as ``--set`` does a broker setting.
- ``failover``: a producer sending one message at a time with acks=-1 (the wire protocol
  itself, following leaders through METADATA v1, so every error answer is seen) to a
  topic of RF 3; the leader is SIGKILLed: the gap is the time from the kill to the next
  acknowledgement (target: ``zookeeper.session.timeout.ms`` + 1 s). Then the new leader
  is stopped with SIGTERM (a controlled shutdown): the error answers the producer saw
  meanwhile are counted (target 0; a NOT_LEADER_FOR_PARTITION, which a producer follows
  by asking for metadata again, is counted apart) and the longest wait for an
  acknowledgement reported.
- ``catchup``: a follower broker stopped, ``--catchup-mb`` MB produced to the leader
  (acks=1, 1 MB requests), the follower started: the time from its start until its log
  end equals the leader's, as MB/s (target >= 200).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import harness  # noqa: E402

SIZE = 100
NOT_LEADER = 22  # the answer that says where to go: followed, not an error a producer sees
COMBOS = ((1, 1), (1, -1), (2, 1), (2, -1), (3, 1), (3, -1))


class Cluster:
    """A ZooKeeper and three brokers (ids 1, 2, 3) under one work dir."""

    def __init__(self, workdir: str, settings: list[str]):
        from kazoo.client import KazooClient

        from tests.cluster.zkserver import ZooKeeperServer

        os.mkdir(os.path.join(workdir, "zk"))
        self.server = ZooKeeperServer(os.path.join(workdir, "zk")).start()
        self.zk = KazooClient(hosts=self.server.connect, timeout=10)
        self.zk.start(timeout=10)
        self.settings = [f"zookeeper.connect={self.server.connect}", *settings]
        self.brokers: dict[int, harness.Broker] = {}
        for broker_id in (1, 2, 3):
            root = os.path.join(workdir, f"b{broker_id}")
            os.mkdir(root)
            self.brokers[broker_id] = harness.Broker(root, [f"broker.id={broker_id}",
                                                            *self.settings])
            self.brokers[broker_id].start()
        wait(lambda: len(self.zk.get_children("/brokers/ids")) == 3, "three brokers")
        wait(lambda: self.zk.exists("/controller") is not None, "a controller")

    def create(self, topic: str, partitions: int, rf: int, *config: str) -> None:
        args = [sys.executable, "-m", "hostbroker", "topics", "create", "--zookeeper",
                self.server.connect, "--topic", topic, "--partitions", str(partitions),
                "--replication-factor", str(rf)]
        for item in config:
            args += ["--config", item]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise harness.BenchError(f"topics create {topic}: {done.stderr.strip()}")
        wait(lambda: all(len(self.state(topic, p)["isr"]) == rf and self.state(topic, p)["leader"] >= 0
                         for p in range(partitions)), f"{topic}: leaders and full ISRs")

    def state(self, topic: str, partition: int) -> dict:
        data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()
        for broker in self.brokers.values():
            broker.stop()
        self.server.stop()


def wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - not there yet
            pass
        if time.monotonic() > deadline:
            raise harness.BenchError(f"timed out waiting for {what}")
        time.sleep(0.05)


def produce_run(cluster: Cluster, topic: str, acks: int, messages: int,
                producer_settings: dict | None = None) -> float:
    from hostbroker.client import Producer

    producer = Producer(config={"zookeeper.connect": cluster.server.connect,
                                "producer.type": "async", "request.required.acks": acks,
                                **(producer_settings or {})})
    return harness.send_timed(producer, topic, messages, SIZE)


def bench_produce(cluster: Cluster, args) -> dict:
    runs = []
    for n in range(args.repeats):
        for rf, acks in (COMBOS if n % 2 == 0 else COMBOS[::-1]):
            topic = f"rf{rf}-acks{'all' if acks < 0 else acks}-{n}"
            cluster.create(topic, 3, rf)
            rate = produce_run(cluster, topic, acks, args.messages,
                               dict(kv.split("=", 1) for kv in args.producer_set))
            runs.append({"rf": rf, "acks": acks, "msgs_per_s": rate})
            harness.log(f"RF {rf} acks={acks:>2}: {rate:>9.0f} msgs/s")
    median = {f"{rf},{acks}": statistics.median(r["msgs_per_s"] for r in runs
                                                if (r["rf"], r["acks"]) == (rf, acks))
              for rf, acks in COMBOS}
    base = median["1,1"]
    ratios = {k: v / base for k, v in median.items()}
    return {"runs": runs, "median_msgs_per_s": median, "ratio_to_rf1_acks1": ratios,
            "target": 0.5, "met": ratios["3,-1"] >= 0.5}


class OneByOne:
    """Sends one message at a time with acks=-1 to partition 0's leader, following it."""

    def __init__(self, cluster: Cluster, topic: str):
        from tests.replication.support import Wire

        self.cluster, self.topic, self.Wire = cluster, topic, Wire
        self.acks: list[float] = []  # monotonic times of acknowledgements
        self.errors: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        wire = leader = None
        n = 0
        while not self.stop.is_set():
            try:
                if wire is None:
                    leader = self.cluster.state(self.topic, 0)["leader"]
                    if leader < 0 or self.cluster.brokers[leader].proc is None:
                        time.sleep(0.02)
                        continue
                    wire = self.Wire(self.cluster.brokers[leader].unix_path, timeout=30)
                code, _ = wire.produce(self.topic, 0, [f"m{n}".encode()], acks=-1)
            except Exception:  # noqa: BLE001 - a dead leader's socket, ZooKeeper between leaders
                code = -1
            if code == 0:
                self.acks.append(time.monotonic())
                n += 1
                continue
            self.errors.append((time.monotonic(), code))
            if wire is not None:
                wire.close()
            wire = None
            time.sleep(0.02)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


def bench_failover(cluster: Cluster, args) -> dict:
    from tests.replication.support import kill_hard

    cluster.create("failover", 1, 3)
    sender = OneByOne(cluster, "failover")
    try:
        wait(lambda: len(sender.acks) > 200, "200 acknowledged")
        victim = cluster.state("failover", 0)["leader"]
        killed = kill_hard(cluster.brokers[victim])
        proc = cluster.brokers[victim].proc
        cluster.brokers[victim].proc = None
        proc.wait(30)
        wait(lambda: sender.acks[-1] > killed, "an acknowledgement after the kill", 120)
        gap = min(t for t in sender.acks if t > killed) - killed
        harness.log(f"leader SIGKILLed: acknowledged again after {gap:.2f} s")
        cluster.brokers[victim].start()
        wait(lambda: len(cluster.state("failover", 0)["isr"]) == 3, "the ISR full again")
        # a controlled shutdown of the current leader
        leader = cluster.state("failover", 0)["leader"]
        before_errors = len(sender.errors)
        stopped_at = time.monotonic()
        cluster.brokers[leader].stop()
        wait(lambda: sender.acks[-1] > time.monotonic() - 0.2, "acknowledgements again")
        time.sleep(1)
        seen = [code for _, code in sender.errors[before_errors:]]
        errors = sum(1 for code in seen if code != NOT_LEADER)
        moved = len(seen) - errors
        window = [t for t in sender.acks if t > stopped_at - 1]
        longest = max((b - a for a, b in zip(window, window[1:])), default=0.0)
        harness.log(f"controlled shutdown: {errors} errors, {moved} NOT_LEADER answers, "
                    f"longest wait {longest * 1000:.0f} ms")
        cluster.brokers[leader].start()
    finally:
        sender.close()
    session_s = args.session_ms / 1000
    return {"kill_gap_s": gap, "target_s": session_s + 1, "kill_met": gap <= session_s + 1,
            "controlled_errors": errors, "controlled_not_leader": moved,
            "controlled_longest_wait_s": longest,
            "controlled_met": errors == 0}


def log_end(broker: harness.Broker, topic: str, partition: int) -> int:
    base = broker.settings["log.dirs"]
    path = os.path.join(base, f"{topic}_{partition}")
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path)
               if n.endswith(".kafka"))


def bench_catchup(cluster: Cluster, args) -> dict:
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    cluster.create("catchup", 1, 2)
    s = cluster.state("catchup", 0)
    leader = s["leader"]
    (follower,) = [b for b in s["isr"] if b != leader]
    cluster.brokers[follower].stop()
    chunk = encode_message_set([os.urandom(5000) for _ in range(200)])  # ~1 MB a request
    target = args.catchup_mb * 1_000_000
    with SimpleClient(cluster.brokers[leader].uri("unix"), timeout=60) as client:
        while log_end(cluster.brokers[leader], "catchup", 0) < target:
            client.produce("catchup", 0, chunk, acks=1)
    end = log_end(cluster.brokers[leader], "catchup", 0)
    harness.log(f"leader holds {end / 1e6:.0f} MB; starting the follower")
    t0 = time.monotonic()
    cluster.brokers[follower].start()
    started = time.monotonic()
    wait(lambda: log_end(cluster.brokers[follower], "catchup", 0) >= end,
         "the follower caught up", 600)
    seconds = time.monotonic() - started
    rate = end / seconds / 1e6
    harness.log(f"follower caught up {end / 1e6:.0f} MB in {seconds:.1f} s "
                f"(+{started - t0:.1f} s start): {rate:.0f} MB/s")
    return {"bytes": end, "seconds": seconds, "start_seconds": started - t0,
            "mb_per_s": rate, "target": 200, "met": rate >= 200}


def run(args) -> dict:
    workdir = tempfile.mkdtemp(prefix="hb-bench-repl-")
    cluster = None
    try:
        cluster = Cluster(workdir, [f"zookeeper.session.timeout.ms={args.session_ms}", *args.set])
        report = {"machine": harness.machine_info(), "args": vars(args)}
        for part, fn in (("produce", bench_produce), ("failover", bench_failover),
                         ("catchup", bench_catchup)):
            if args.only in (None, part):
                report[part] = fn(cluster, args)
        return report
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)


def print_report(report: dict) -> None:
    if "produce" in report:
        p = report["produce"]
        print("produce 100 B, 3 partitions, one async producer (median msgs/s, ratio to RF 1 acks=1):")
        for key, rate in p["median_msgs_per_s"].items():
            rf, acks = key.split(",")
            print(f"  RF {rf} acks={acks:>2}  {rate:>9.0f}  {p['ratio_to_rf1_acks1'][key]:.2f}")
        print(f"  RF 3 acks=-1 >= 0.5 of RF 1 acks=1: {'met' if p['met'] else 'NOT met'}")
    if "failover" in report:
        f = report["failover"]
        print(f"leader SIGKILLed: acknowledged again after {f['kill_gap_s']:.2f} s "
              f"(target {f['target_s']:.1f} s: {'met' if f['kill_met'] else 'NOT met'})")
        print(f"controlled shutdown: {f['controlled_errors']} errors, "
              f"{f['controlled_not_leader']} NOT_LEADER answers (followed), longest wait "
              f"{f['controlled_longest_wait_s'] * 1000:.0f} ms")
    if "catchup" in report:
        c = report["catchup"]
        print(f"follower catch-up: {c['bytes'] / 1e6:.0f} MB in {c['seconds']:.1f} s = "
              f"{c['mb_per_s']:.0f} MB/s (target 200: {'met' if c['met'] else 'NOT met'})")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("produce", "failover", "catchup"))
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--catchup-mb", type=int, default=1024)
    parser.add_argument("--session-ms", type=int, default=6000,
                        help="zookeeper.session.timeout.ms of the brokers (default: the default)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable; tuned runs say so)")
    parser.add_argument("--producer-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a producer setting for the produce part (repeatable; tuned "
                             "runs say so)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--json-out", metavar="FILE", help="also write the report here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    harness.output(run(args), args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
