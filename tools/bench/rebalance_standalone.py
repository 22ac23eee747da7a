#!/usr/bin/env python3
"""Consumer groups on one standalone broker: rebalance time and aggregate consumption.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/rebalance_standalone.py
    .venv/bin/python tools/bench/rebalance_standalone.py --cycles 1 --messages 200000

One ``hostbroker serve`` (tests/integration/broker.py, no ZooKeeper), started
here and stopped by PID at the end; every client setting at its default.

**Rebalance** (``--cycles``, ``--members``): a topic of 12 partitions and
member processes of one group (``ConsumerConnector`` through the broker's
group coordinator) join one at a time up to ``--members``, then leave one at
a time (SIGTERM: ``shutdown()`` commits, then LEAVE_GROUP). A change is timed
from the member's own clock (``time.monotonic``, one clock for every process
of the host) just before its JOIN (``create_message_streams``) or its
``shutdown()`` (so a leave includes the member's own shutdown: its fetchers
stopped, its commit, LEAVE_GROUP; printed apart), until DESCRIBE_GROUP shows a STABLE generation of exactly the
live members, each owning the range split of the 12 partitions, and every
live member has printed from ``on_partitions_assigned`` that generation and
those partitions. Target: p50 under 300 ms, max under 1 s.

**Consumption** (``--messages``, ``--counts``, ``--repeats``): a second topic
of 12 partitions holding ``--messages`` 100-byte messages, produced first;
then, for each count in turn (1, 2, 4, 1, 2, 4 by default), that many member
processes of a new group read it from the start. They are started and wait,
imported and connected, for one "go" line; the time runs from it to the last
message any of them hands out, once the highest offset handed out of every
partition is its end. Printed: msgs/s and MB/s of every run, and the
messages handed out twice (uncommitted hand-outs of partitions a rebalance
moved), and the CPU seconds the members (from "go" to their last report) and
the broker's processes (from "go" to the end) used: on a machine of few cores
they share the cores, which bounds what more members can add.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import harness  # noqa: E402
from rebalance_common import run_cycles, wait_until  # noqa: E402

PARTITIONS = 12
GROUP = "bench"
TOPIC = "events"
DATA_TOPIC = "data"
SIZE = 100

MEMBER = """
import signal, sys, threading, time
from hostbroker.client import ConsumerConnector, ConsumerTimeoutError

uri, group, topic = sys.argv[1:4]
lock = threading.Lock()

def say(*words):
    with lock:
        print(*words, flush=True)

class Listener:
    def on_partitions_revoked(self, keys):
        pass
    def on_partitions_assigned(self, keys):
        member = connector.cluster.member
        say("a", member.generation, member.member_id, *sorted(p for _, p in keys))

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
connector = ConsumerConnector(uri, group_id=group, consumer_timeout_ms=100,
                              rebalance_listener=Listener())
say("ready")
sys.stdin.readline()
say("join", time.monotonic())
(stream,) = connector.create_message_streams({topic: 1})[topic]
while not stop.is_set():
    try:
        next(stream)
    except ConsumerTimeoutError:
        pass
say("leave", time.monotonic())
connector.shutdown()
say("bye", time.monotonic())
"""

READER = """
import signal, sys, threading, time
from hostbroker.client import ConsumerConnector, ConsumerTimeoutError

uri, group, topic = sys.argv[1:4]
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
connector = ConsumerConnector(uri, group_id=group, consumer_timeout_ms=200,
                              auto_offset_reset="earliest")
print("ready", flush=True)
sys.stdin.readline()
cpu = time.process_time()
(stream,) = connector.create_message_streams({topic: 1})[topic]
ends, count, last, told = {}, 0, 0.0, -1
clock = time.monotonic
while not stop.is_set():
    try:
        for m in stream:
            ends[m.partition] = m.next_offset
            count += 1
            last = clock()
    except ConsumerTimeoutError:
        pass
    if count != told:
        told = count
        print("n", count, last, time.process_time() - cpu, *(f"{p}:{o}" for p, o in sorted(ends.items())), flush=True)
connector.shutdown()
print("bye", flush=True)
"""


class Member:
    """A process of ``script`` in ``group``, started and waiting for "go"; its lines kept."""

    def __init__(self, script: str, uri: str, group: str, topic: str, env: dict):
        self.proc = subprocess.Popen([sys.executable, script, uri, group, topic],
                                     stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                                     env=env, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self) -> None:
        wait_until(lambda: "ready" in self.lines or self.proc.poll() is not None,
                   time.monotonic() + 60, "a member to start", 0.01)
        if "ready" not in self.lines:
            raise SystemExit(f"a member ended with {self.proc.returncode}")

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def last(self, word: str) -> list[str] | None:
        """The words after ``word`` on its last line starting with it."""
        for line in reversed(list(self.lines)):
            words = line.split()
            if words and words[0] == word:
                return words[1:]
        return None

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def stable(client, live: list[Member]) -> bool:
    """DESCRIBE_GROUP: STABLE, exactly ``live``, the range split, each member synced
    (EMPTY when none is left)."""
    from hostbroker.cluster.rebalance import assign

    said = [m.last("a") for m in live]
    if any(words is None for words in said):
        return False
    described = client.describe_group(GROUP)
    if not live:  # the last one left
        return described.error_code == 0 and described.phase == "EMPTY"
    if described.error_code or described.phase != "STABLE":
        return False
    ids = sorted(dm.member_id for dm in described.members)
    if ids != sorted(words[1] for words in said):
        return False
    plan = assign(range(PARTITIONS), [(member_id, 0) for member_id in ids])
    for dm in described.members:
        held = sorted(p for sa in dm.assignment if sa.topic == TOPIC for p in sa.partitions)
        if held != plan[(dm.member_id, 0)]:
            return False
    return all(int(words[0]) == described.generation
               and [int(p) for p in words[2:]] == plan[(words[1], 0)] for words in said)


def rebalance(args, broker, workdir: str, env: dict, started: list[Member]) -> None:
    from hostbroker.client.coordinator_requests import CoordinatorClient

    with broker.client() as client:
        client.create_topic(TOPIC, PARTITIONS)
    script = os.path.join(workdir, "member.py")
    with open(script, "w") as f:
        f.write(MEMBER)
    describer = CoordinatorClient([broker.unix], timeout=10, client_id="bench")
    live: list[Member] = []

    def join() -> float:
        member = Member(script, broker.unix, GROUP, TOPIC, env)
        started.append(member)
        member.wait_ready()
        live.append(member)
        member.go()
        settled = wait_until(lambda: member.last("join") is not None
                             and stable(describer, live),
                             time.monotonic() + 60, "the group to settle after a join")
        return settled - float(member.last("join")[0])

    def leave() -> float:
        member = live.pop(0)
        member.stop()
        settled = wait_until(lambda: member.last("leave") is not None
                             and stable(describer, live),
                             time.monotonic() + 60, "the group to settle after a leave")
        took = settled - float(member.last("leave")[0])
        if member.proc.wait(30) != 0:
            raise SystemExit("a member did not end cleanly")
        wait_until(lambda: member.last("bye") is not None, time.monotonic() + 10, "its output")
        shutdowns.append(float(member.last("bye")[0]) - float(member.last("leave")[0]))
        return took

    shutdowns: list[float] = []
    try:
        run_cycles(args.cycles, args.members, join, leave)
    finally:
        describer.close()
    print(f"of a leave, the leaving member's shutdown() (stop fetching, commit, LEAVE_GROUP): "
          f"p50 {statistics.median(shutdowns) * 1000:.0f} ms, "
          f"max {max(shutdowns) * 1000:.0f} ms", flush=True)


def produce(broker, messages: int) -> list[int]:
    """``messages`` of SIZE bytes spread evenly over DATA_TOPIC; each partition's end."""
    from hostbroker.log.message import encode_message_set

    with broker.client() as client:
        client.create_topic(DATA_TOPIC, PARTITIONS)
        batch = 2000
        payloads = [os.urandom(SIZE // 2).hex().encode() for _ in range(batch)]
        sets = {n: encode_message_set(payloads[:n]) for n in {batch, messages % batch} if n}
        sent, partition, t0 = 0, 0, time.perf_counter()
        while sent < messages:
            n = min(batch, messages - sent)
            client.produce(DATA_TOPIC, partition, sets[n])
            sent += n
            partition = (partition + 1) % PARTITIONS
        took = time.perf_counter() - t0
        print(f"produced {messages:,} x {SIZE} B in {took:.1f} s", flush=True)
        return [client.offsets(DATA_TOPIC, p)[0] for p in range(PARTITIONS)]


def consume_run(count: int, run: int, broker, script: str, env: dict, ends: list[int],
                messages: int, started: list[Member]) -> dict:
    group = f"read-{run}-{count}"
    members = [Member(script, broker.unix, group, DATA_TOPIC, env) for _ in range(count)]
    started.extend(members)
    for member in members:
        member.wait_ready()
    pids = {**broker.workers(), "serve": broker.proc.pid}
    broker_cpu = sum(harness.cpu_seconds(pids).values())
    t0 = time.monotonic()
    for member in members:
        member.go()

    def done() -> bool:
        reached = [0] * PARTITIONS
        for member in members:
            for pair in (member.last("n") or [])[3:]:
                p, o = map(int, pair.split(":"))
                reached[p] = max(reached[p], o)
        return reached == ends

    wait_until(done, time.monotonic() + 300, f"{count} members to read the topic", 0.05)
    end = max(float(m.last("n")[1]) for m in members if m.last("n"))
    broker_cpu = sum(harness.cpu_seconds(pids).values()) - broker_cpu
    handed = sum(int(m.last("n")[0]) for m in members if m.last("n"))
    members_cpu = sum(float(m.last("n")[2]) for m in members if m.last("n"))
    for member in members:
        member.stop()
    for member in members:
        member.proc.wait(30)
    seconds = end - t0
    return {"members": count, "seconds": seconds, "msgs_s": messages / seconds,
            "mb_s": messages * SIZE / seconds / 1e6, "twice": handed - messages,
            "members_cpu": members_cpu, "broker_cpu": broker_cpu}


def consumption(args, broker, workdir: str, env: dict, started: list[Member]) -> None:
    ends = produce(broker, args.messages)
    script = os.path.join(workdir, "reader.py")
    with open(script, "w") as f:
        f.write(READER)
    results: dict[int, list[dict]] = {n: [] for n in args.counts}
    for run in range(args.repeats):
        for count in args.counts:
            r = consume_run(count, run, broker, script, env, ends, args.messages, started)
            results[count].append(r)
            print(f"run {run + 1}, {count} member(s): {r['seconds']:.2f} s, "
                  f"{r['msgs_s']:,.0f} msgs/s, {r['mb_s']:.1f} MB/s, "
                  f"{r['twice']} handed out twice; CPU s: members {r['members_cpu']:.2f}, "
                  f"broker {r['broker_cpu']:.2f}", flush=True)
    for count, rs in results.items():
        rate = statistics.median(r["msgs_s"] for r in rs)
        print(f"{count} member(s): median {rate:,.0f} msgs/s, "
              f"{statistics.median(r['mb_s'] for r in rs):.1f} MB/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--members", type=int, default=6)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--counts", type=lambda s: [int(n) for n in s.split(",")],
                        default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip", choices=("rebalance", "consumption"))
    args = parser.parse_args()

    from tests.integration.broker import Broker

    env = {**os.environ, "PYTHONPATH": ROOT}
    started: list[Member] = []
    # Undone last to first: the members killed, the broker stopped, its files removed.
    with tempfile.TemporaryDirectory(prefix="hb-groups-") as workdir, ExitStack() as undo:
        broker = Broker(workdir).start()
        undo.callback(broker.stop)
        undo.callback(lambda: [member.kill() for member in started])
        if args.skip != "rebalance":
            rebalance(args, broker, workdir, env, started)
        if args.skip != "consumption":
            consumption(args, broker, workdir, env, started)

if __name__ == "__main__":
    main()
