"""The standing randomized fault test of replication.

Three real brokers on a real ZooKeeper hold a replicated topic (replication factor 3,
``min.insync.replicas=2``) while a producer sends with acks=-1 and follows leaders.
For ``HB_FAULT_SECONDS`` (default 40 s; longer by hand) a seeded random schedule, one
fault at a time every 2 to 5 s, does one of:

- SIGKILL a whole broker (every process at once), started again a few seconds later;
- SIGTERM a broker (a controlled shutdown: leaderships move first), started again;
- SIGSTOP a broker's follower fetcher past ``replica.lag.time.max.ms``, then SIGCONT;
- stop ZooKeeper for a few seconds and start it again (sessions survive or expire).

At most one broker is down at a time. Afterwards every broker runs, every ISR is full
again, and the invariant is checked: nothing acknowledged is lost, and no replica
differs from the leader below the high watermark. The seed is printed (and taken from
``HB_FAULT_SEED``) so a failing schedule can be run again. docs/testing.md
("Replication") records what it ran.
"""

from __future__ import annotations

import os
import random
import signal
import time

import psutil

from tests.replication.support import (
    Feeder, create, kill_hard, poll, segment_bytes, settled, state)
from tests.replication.test_failover import TOPIC, check_acked, high_watermark, read_back

PARTITIONS = 2


def _fetcher(broker) -> list[psutil.Process]:
    return [p for p in psutil.Process(broker.proc.pid).children()
            if p.name().startswith("hb-replica")]


def test_random_faults_lose_nothing_acknowledged(cluster, zookeeper, zk):
    seconds = float(os.environ.get("HB_FAULT_SECONDS", "40"))
    seed = int(os.environ.get("HB_FAULT_SEED", str(int(time.time()))))
    print(f"random fault schedule: seed {seed}, {seconds} s")
    rng = random.Random(seed)
    create(zookeeper, TOPIC, PARTITIONS, 3, "min.insync.replicas=2")
    poll(lambda: settled(zk, TOPIC, PARTITIONS, 3), what="leaders and full ISRs")
    feeder = Feeder(cluster, TOPIC, PARTITIONS)
    done: list[str] = []
    try:
        poll(lambda: len(feeder.acked) >= 50, what="50 acknowledged before the first fault")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(rng.uniform(2, 5))
            victim = rng.choice(sorted(cluster))
            fault = rng.choice(("kill", "term", "pause fetcher", "zookeeper"))
            done.append(f"{fault} {victim}")
            if fault in ("kill", "term"):
                if fault == "kill":
                    kill_hard(cluster[victim])
                    cluster[victim].kill_tree()
                else:
                    cluster[victim].stop(timeout=30)
                time.sleep(rng.uniform(1, 4))
                cluster[victim].start()  # the same broker.id, listeners and log dir
            elif fault == "pause fetcher":
                stopped = _fetcher(cluster[victim])
                for p in stopped:
                    p.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(3.5, 5))
                for p in stopped:
                    p.send_signal(signal.SIGCONT)
            else:
                zookeeper.stop()
                time.sleep(rng.uniform(1, 4))
                zookeeper.start()
        poll(lambda: settled(zk, TOPIC, PARTITIONS, 3), timeout=60,
             what=f"full ISRs again after {done}")
        count = len(feeder.acked)
        poll(lambda: len(feeder.acked) >= count + 20, timeout=30,
             what="acknowledgements after the last fault")
    finally:
        feeder.stop()
    print(f"faults: {done}; acknowledged: {len(feeder.acked)}; errors seen: {len(feeder.errors)}")
    check_acked(feeder, read_back(cluster, zk, TOPIC, PARTITIONS))
    for p in range(PARTITIONS):
        leader = state(zk, TOPIC, p)["leader"]
        hw = high_watermark(cluster[leader], TOPIC, p)
        poll(lambda: all(len(segment_bytes(b, TOPIC, p)) >= hw for b in cluster.values()),
             what=f"every replica of partition {p} up to the high watermark")
        reference = segment_bytes(cluster[leader], TOPIC, p)[:hw]
        for broker_id, broker in cluster.items():
            assert segment_bytes(broker, TOPIC, p)[:hw] == reference, (
                f"partition {p}: broker {broker_id} differs below the high watermark "
                f"(seed {seed}, faults {done})")
