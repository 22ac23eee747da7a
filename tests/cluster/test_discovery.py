"""ClusterView on a real ZooKeeper: brokers and topic partitions come and go through watches."""

from __future__ import annotations

import threading
import time

from hostbroker.cluster import paths
from hostbroker.cluster.discovery import ClusterView, read_snapshot


def register(zk, broker_id, port, topics, ephemeral=True):
    info = paths.BrokerInfo(broker_id, "127.0.0.1", port, None)
    zk.create(paths.broker_path(broker_id), paths.encode_broker(info), makepath=True,
              ephemeral=ephemeral)
    for topic, count in topics.items():
        zk.create(paths.topic_broker_path(topic, broker_id), paths.encode_count(count),
                  makepath=True, ephemeral=ephemeral)


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_snapshot_pairs_only_live_brokers(zk):
    register(zk, 2, 9002, {"t": 2})
    register(zk, 1, 9001, {"t": 1, "u": 3})
    zk.create(paths.topic_broker_path("t", 7), b"5", makepath=True)  # broker 7 is not live
    snap = read_snapshot(zk)
    assert sorted(snap.brokers) == [1, 2]
    assert snap.partitions("t") == ((1, 0), (2, 0), (2, 1))
    assert snap.partitions("u") == ((1, 0), (1, 1), (1, 2))


def test_view_follows_joins_leaves_and_new_topics(zk, zookeeper):
    from kazoo.client import KazooClient

    other = KazooClient(hosts=zookeeper.connect)
    other.start(timeout=10)
    changes = []
    seen = threading.Event()

    def on_change(snapshot):
        changes.append(snapshot)
        seen.set()
    view = ClusterView(zk, on_change, refresh_ms=60_000)  # only watches can wake it
    try:
        register(other, 1, 9001, {"t": 2})
        wait_until(lambda: view.snapshot.partitions("t") == ((1, 0), (1, 1)))
        register(other, 2, 9002, {"t": 1})
        wait_until(lambda: view.snapshot.partitions("t") == ((1, 0), (1, 1), (2, 0)))
        other.create(paths.topic_broker_path("fresh", 2), b"1", ephemeral=True, makepath=True)
        wait_until(lambda: view.snapshot.partitions("fresh") == ((2, 0),))
        other.delete(paths.broker_path(1))  # broker 1 leaves: its pairs go with it
        wait_until(lambda: view.snapshot.partitions("t") == ((2, 0),))
        other.stop()  # the session's ephemeral nodes go: broker 2 too
        wait_until(lambda: view.snapshot.brokers == {} and view.snapshot.topics == {})
        assert seen.is_set() and changes[-1] == view.snapshot
    finally:
        view.close()
        other.close()


def test_malformed_values_are_left_out(zk):
    zk.create(paths.broker_path(3), b"not json", makepath=True)
    register(zk, 4, 9004, {"t": 1})
    zk.create(paths.topic_broker_path("t", 3), b"x", makepath=True)
    snap = read_snapshot(zk)
    assert sorted(snap.brokers) == [4] and snap.partitions("t") == ((4, 0),)


def test_view_watches_a_topic_created_again(zk):
    register(zk, 1, 9001, {"t": 1})
    view = ClusterView(zk, refresh_ms=60_000)  # only watches can wake it
    try:
        assert view.snapshot.partitions("t") == ((1, 0),)
        zk.delete(paths.topic_path("t"), recursive=True)  # its watch ends with it
        wait_until(lambda: "t" not in view._topic_watches)  # noqa: SLF001 - seen gone
        zk.create(paths.topic_path("t"))  # back, still without brokers
        wait_until(lambda: "t" in view._topic_watches)  # noqa: SLF001 - watched again
        # A broker registering it changes only the topic's children: only its watch sees it.
        zk.create(paths.topic_broker_path("t", 1), b"2")
        wait_until(lambda: view.snapshot.partitions("t") == ((1, 0), (1, 1)))
    finally:
        view.close()
