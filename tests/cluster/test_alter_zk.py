"""``topics alter --zookeeper`` on a running cluster (issue 37): three real brokers on
a real ZooKeeper, a replicated topic under an acks=-1 producer's load.

Partitions added get leaders at once (the controller watches the topic node),
receive the producer's messages, and the brokers' group coordinator deals them
out (the registrars watch the node too); nothing acknowledged is lost; shrinking
is refused in one line.
"""

from __future__ import annotations

import io
import time

import pytest

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.commands.topics_alter_zk import alter_cluster
from hostbroker.errors import ErrorCode
from tests.replication.conftest import cluster  # noqa: F401 - fixture
from tests.replication.support import (
    Feeder,
    Wire,
    create,
    fetch_all,
    poll,
    settled,
    state,
)


def alter(zookeeper, topic, partitions=None, set_configs=None, delete_configs=()) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert alter_cluster(zookeeper.connect, topic, partitions, dict(set_configs or {}),
                         list(delete_configs), out, err) == 0, err.getvalue()
    return out.getvalue()


def read_back(cluster, zk, topic: str, acked) -> None:
    """Every acknowledged value is in its partition, at its offset, on the leader."""
    by_partition: dict[int, dict[int, bytes]] = {}
    for partition, offset, value in acked:
        by_partition.setdefault(partition, {})[offset] = value
    for partition, wanted in sorted(by_partition.items()):
        leader = state(zk, topic, partition)["leader"]
        wire = Wire(cluster[leader].unix_path)
        try:
            got = dict(fetch_all(wire, topic, partition))
        finally:
            wire.close()
        assert {o: got.get(o) for o in wanted} == wanted, f"{topic}-{partition}"


def members_partitions(client: CoordinatorClient, group: str, topic: str, member: str,
                       generation: int) -> tuple[str, int, tuple[int, ...]]:
    """Rejoin until the coordinator's generation holds; (member, generation, partitions)."""
    for _ in range(20):
        joined = client.join_group(group, member, {topic: 1}, session_timeout_ms=30000,
                                   rebalance_timeout_ms=5000)
        member, generation = joined.member_id, joined.generation
        code, assignment = client.sync_group(group, generation, member)
        if code == ErrorCode.NONE:
            return member, generation, tuple(sorted(assignment.get(topic, {}).get(0, ())))
        time.sleep(0.1)
    raise AssertionError("the group never settled")


def test_partitions_grow_under_load_receive_and_are_dealt_out(cluster, zookeeper, zk):
    topic = "grow"
    create(zookeeper, topic, 2, 2)
    poll(lambda: settled(zk, topic, 2, 2), what="two partitions led")
    group = CoordinatorClient([cluster[1].unix], timeout=10, client_id="alter-test")
    feeder = Feeder(cluster, topic, 2)
    try:
        member, generation, dealt = members_partitions(group, "g", topic, "", -1)
        deadline = time.monotonic() + 15
        while dealt != (0, 1):  # until this broker's registrar has published the topic
            assert time.monotonic() < deadline, dealt
            time.sleep(0.2)
            member, generation, dealt = members_partitions(group, "g", topic, member,
                                                           generation)
        poll(lambda: len(feeder.acked) >= 50, what="the producer under way")
        before = {p: state(zk, topic, p) for p in (0, 1)}
        asked = time.monotonic()
        assert alter(zookeeper, topic, 5).strip() == f"altered topic {topic}: partitions 2 -> 5"
        poll(lambda: settled(zk, topic, 5, 2), timeout=10, what="three new partitions led")
        # the controller's watch, not the registrars' 30 s full read
        assert time.monotonic() - asked < 10
        assert {p: state(zk, topic, p) for p in (0, 1)} == before  # no leader moved
        feeder.partitions = 5
        poll(lambda: {p for p, _, _ in feeder.acked} >= {2, 3, 4}, timeout=30,
             what="the new partitions receiving")
        # the coordinator counts 5 now: the member is asked to rejoin, and gets them all
        poll(lambda: group.heartbeat("g", generation, member)
             == ErrorCode.REBALANCE_IN_PROGRESS, timeout=10, what="a rebalance")
        member, generation, dealt = members_partitions(group, "g", topic, member, generation)
        assert dealt == (0, 1, 2, 3, 4)
        # shrinking is refused in one line, and nothing changes
        from hostbroker.exits import CommandError

        with pytest.raises(CommandError, match="partitions only grow"):
            alter_cluster(zookeeper.connect, topic, 3, {}, [], io.StringIO(), io.StringIO())
    finally:
        feeder.stop()
        group.close()
    assert feeder.acked
    read_back(cluster, zk, topic, feeder.acked)
