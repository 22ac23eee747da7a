"""Standing cases: a replicated topic's assignment as a ZooKeeper consumer group reads it.

Whoever can write ``/brokers/topics/[topic]`` can write any value there. The
cluster view a group rebalances from reads it through the bounded readers: a
value that is no assignment, one past the partition bounds, or a topic that
would take the cluster past ``zookeeper.max.partitions``, gives that topic
no partitions (one line naming the path), and the rest of the cluster is
read as before. A replicated topic's node never mixes in 0.7-style
registrations written under it. Real ZooKeeper.
"""

from __future__ import annotations

import json

from hostbroker.cluster import paths, zkread
from hostbroker.cluster.discovery import read_snapshot
from hostbroker.cluster.membership import GroupMember, PartitionKey
from tests.cluster.conftest import zk, zookeeper  # noqa: F401 - fixtures


class Said:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __call__(self, path: str, problem: str) -> None:
        self.lines.append((path, problem))


def assignment(partitions: int, replicas=(1, 2)) -> bytes:
    return json.dumps({"version": 1, "partitions": {
        str(p): list(replicas) for p in range(partitions)}}).encode()


def live_broker(zk, broker_id: int) -> None:
    info = paths.BrokerInfo(broker_id, "127.0.0.1", 9092 + broker_id, None)
    zk.create(paths.broker_path(broker_id), paths.encode_broker(info), makepath=True)


def test_bad_assignments_give_their_topic_no_partitions_and_the_rest_is_read(zk):
    live_broker(zk, 1)
    zk.create(paths.topic_broker_path("plain", 1), b"2", makepath=True)
    zk.create(paths.topic_path("good"), assignment(3), makepath=True)
    bad = {
        "notjson": b"{\"version\":1,\"partitions\":",
        "deep": b"[" * 5000 + b"]" * 5000,
        "gap": json.dumps({"version": 1, "partitions": {"0": [1], "5": [1]}}).encode(),
        "phantom": json.dumps({"version": 1, "partitions": {
            "0": [1], "4000000000": [1]}}).encode(),
        "brokers": json.dumps({"version": 1, "partitions": {"0": [1, 1]}}).encode(),
        "huge": assignment(60),
    }
    for topic, value in bad.items():
        zk.create(paths.topic_path(topic), value, makepath=True)
    # a 0.7-style registration written under a replicated topic is not one of its partitions
    zk.create(paths.topic_broker_path("good", 1), b"7", makepath=True)
    said = Said()
    snapshot = read_snapshot(zk, said, zkread.Bounds.of({"zookeeper.max.node.bytes": 600}))
    assert snapshot.topics == {"plain": ((1, 0), (1, 1))}
    assert snapshot.replicated == {"good": 3}
    assert snapshot.group_partitions("good") == tuple((paths.REPLICATED, p) for p in range(3))
    assert snapshot.partitions("good") == ()
    for topic in ("notjson", "deep", "gap", "phantom", "brokers"):
        assert snapshot.group_partitions(topic) == ()
        assert any(path == paths.topic_path(topic) for path, _ in said.lines), topic
    assert snapshot.group_partitions("huge") == ()  # past zookeeper.max.node.bytes
    assert any(path == paths.topic_path("huge") for path, _ in said.lines)
    assert all(len(problem.splitlines()) == 1 for _, problem in said.lines)


def test_replicated_partitions_count_against_the_cluster_partition_bound(zk):
    live_broker(zk, 1)
    bounds = zkread.Bounds.of({"zookeeper.max.partitions": 10})
    zk.create(paths.topic_path("a"), assignment(6), makepath=True)
    zk.create(paths.topic_path("b"), assignment(6), makepath=True)
    said = Said()
    snapshot = read_snapshot(zk, said, bounds)
    assert snapshot.replicated == {"a": 6}
    assert [path for path, _ in said.lines] == [paths.topic_path("b")]
    assert "zookeeper.max.partitions" in said.lines[0][1]


def test_owner_and_offset_nodes_of_a_replicated_partition_are_its_bare_number(zk):
    """A group's nodes of a replicated partition are named by its global number (Kafka
    0.8's layout), a 0.7 partition's ``broker-partition``; a hostile name is neither."""
    assert paths.partition_name(paths.REPLICATED, 4) == "4"
    assert paths.parse_partition_name("4") == (paths.REPLICATED, 4)
    assert paths.parse_partition_name("2-4") == (2, 4)
    for name in ("-4", "4-", "x", "1" * 11, "٣"):
        try:
            paths.parse_partition_name(name)
        except ValueError:
            continue
        raise AssertionError(f"{name!r} parsed")
    key = PartitionKey("t", 4, paths.REPLICATED)
    assert key.name == "4"
    assert paths.owner_path("g", "t", key.broker_id, key.partition) == "/consumers/g/owners/t/4"

    class Idle:
        def owned(self):
            return {}

    live_broker(zk, 1)
    zk.create(paths.topic_path("t"), assignment(5), makepath=True)
    from hostbroker.cluster.discovery import ClusterView

    member = GroupMember(zk, "g", Idle(), lambda _s: {"t": 2}, consumer_id="c")
    view = ClusterView(zk)
    try:
        member.view = view
        plan = member.plan(view.snapshot, {"t": 2})
    finally:
        view.close()
    assert plan == {PartitionKey("t", p, paths.REPLICATED): 0 if p < 3 else 1
                    for p in range(5)}
