#!/usr/bin/env python3
"""How long a consumer group takes to rebalance after a member joins or leaves.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/rebalance_zk.py
    .venv/bin/python tools/bench/rebalance_zk.py --cycles 5 --consumers 4

One ZooKeeper (Debian's ``ZooKeeperServerMain``, tests/cluster/zkserver.py)
and 3 brokers (``hostbroker serve`` in cluster mode, registering themselves),
a topic of 4 partitions on each (12 in all), and ``--consumers`` consumer
processes of one group, every client setting at its default. Each cycle the
consumers join one at a time, then leave one at a time (SIGTERM: a clean
shutdown). For every change the clock runs from the moment ZooKeeper shows it
(the member's node under ``/consumers/[group]/ids`` appears or disappears)
until the owner nodes are exactly the range assignment of the members then
registered: every partition owned, by the right stream. Prints each time and
the p50 and maximum of joins and leaves (target: p50 under 1 s, max under 3 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

CONSUMER = """
import signal, sys, threading
from hostbroker.client import ConsumerConnector, ConsumerTimeoutError

zk, group, topic = sys.argv[1:4]
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
connector = ConsumerConnector(zookeeper_connect=zk, group_id=group, consumer_timeout_ms=100)
(stream,) = connector.create_message_streams({topic: 1})[topic]
print(connector.cluster.member.consumer_id, flush=True)
while not stop.is_set():
    try:
        next(stream)
    except ConsumerTimeoutError:
        pass
connector.shutdown()
"""

GROUP = "bench"
TOPIC = "events"

from rebalance_common import run_cycles, wait_until  # noqa: E402
from tests.cluster.e2e_support import owners  # noqa: E402 - the tests' reading of owner nodes


def members(zk) -> list[str]:
    from kazoo.exceptions import NoNodeError

    from hostbroker.cluster import paths
    try:
        return sorted(zk.get_children(paths.group_ids_path(GROUP)))
    except NoNodeError:
        return []


def expected(pairs, consumer_ids) -> dict[str, str]:
    from hostbroker.cluster import paths, rebalance
    if not consumer_ids:
        return {}
    plan = rebalance.assign_group({TOPIC: pairs}, {c: {TOPIC: 1} for c in consumer_ids})[TOPIC]
    return {paths.partition_name(b, p): f"{c}-{i}" for (c, i), ps in plan.items() for b, p in ps}


def settle(zk, pairs, change_seen, timeout: float = 60.0) -> float:
    """Seconds from ``change_seen()`` turning true to the owners matching the members."""
    deadline = time.monotonic() + timeout
    start = wait_until(change_seen, deadline, "the change to show in ZooKeeper")
    settled = wait_until(lambda: owners(zk, GROUP, TOPIC) == expected(pairs, members(zk)),
                         deadline, "the owners to match the members")
    return settled - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=4)
    args = parser.parse_args()

    from kazoo.client import KazooClient

    from hostbroker.client import SimpleClient
    from tests.cluster.zkserver import ZooKeeperServer
    from tests.integration.broker import Broker

    workdir = tempfile.mkdtemp(prefix="hb-rebalance-")
    zookeeper = ZooKeeperServer(workdir).start()
    brokers = []
    consumers: list[subprocess.Popen] = []
    zk = KazooClient(hosts=zookeeper.connect)
    try:
        for broker_id in (1, 2, 3):
            root = os.path.join(workdir, f"broker{broker_id}")
            os.mkdir(root)
            broker = Broker(root, zookeeper_connect=zookeeper.connect, broker_id=broker_id)
            brokers.append(broker.start())
            with SimpleClient(broker.unix) as client:
                client.create_topic(TOPIC, 4)
        pairs = [(b, p) for b in (1, 2, 3) for p in range(4)]
        zk.start(timeout=10)
        script = os.path.join(workdir, "consumer.py")
        with open(script, "w") as f:
            f.write(CONSUMER)
        env = {**os.environ, "PYTHONPATH": ROOT}

        def join() -> float:
            before = set(members(zk))
            proc = subprocess.Popen([sys.executable, script, zookeeper.connect, GROUP, TOPIC],
                                    stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env=env, text=True)
            consumers.append(proc)
            return settle(zk, pairs, lambda: len(set(members(zk)) - before) == 1)

        def leave() -> float:
            proc = consumers.pop(0)
            before = set(members(zk))
            proc.send_signal(signal.SIGTERM)
            took = settle(zk, pairs, lambda: len(before - set(members(zk))) == 1)
            proc.wait(30)
            return took

        run_cycles(args.cycles, args.consumers, join, leave)
    finally:
        for proc in consumers:
            proc.kill()
            proc.wait(10)
        zk.stop()
        zk.close()
        for broker in brokers:
            broker.stop()
        zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
