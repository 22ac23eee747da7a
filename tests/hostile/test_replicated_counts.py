"""Standing cases: replicated topics' partition counts, as the group coordinator takes
them (issue 35).

The registrar publishes each replicated topic's partition count with its name
(hostbroker/workers/registrar_names.py, shm/topicnames.py) and the broker's group
coordinator deals out that many partitions (workers/coordinator/groups.py). What
ZooKeeper holds is hostile, and none of it may make the published table or the
coordinator's state unbounded, nor make a group lose partitions it had:

- an assignment node over ``zookeeper.max.partitions.per.registration``, too long, or
  not an assignment counts as replicated with no count (0), and the coordinator then
  keeps the count of its own partition table;
- more replicated topics than the table holds are cut at its capacity (INCOMPLETE), a
  name too long for an entry is kept as a hash only;
- a count over ``max.partitions`` is cut there by the coordinator, said once;
- an unfinished write of the registrar's reads as no view, and the coordinator keeps
  the counts it had until the write is whole; a registrar restarted after dying
  mid-write publishes a whole view again.

A real ZooKeeper (one for the module, a chroot per test), real shared memory, and a
real coordinator state (its ``__groups.log`` in a temporary directory).
"""

from __future__ import annotations

import itertools
import os

import pytest

from hostbroker.config import Config
from hostbroker.cluster import replica_nodes
from hostbroker.shm.partitions import ONLINE, PartitionTable
from hostbroker.shm.region import SharedRegion
from hostbroker.shm.topicnames import INCOMPLETE, ReplicatedNames
from hostbroker.workers.coordinator.groups import GroupHost
from tests.hostile.test_replicated_names import client, reader, zkserver  # noqa: F401 - fixtures

_roots = itertools.count()


def _shared(cls, capacity: int):
    region = SharedRegion.create(f"/hbtest-rcounts-{os.getpid()}-{next(_roots)}",
                                 cls.region_size(capacity))
    structure = cls.create(region, capacity)
    yield structure
    structure.close()
    region.close()
    region.unlink()


@pytest.fixture
def names():
    yield from _shared(ReplicatedNames, 8)


@pytest.fixture
def table():
    yield from _shared(PartitionTable, 16)


def host(table, names, tmp_path, **settings) -> GroupHost:
    config = Config.build(overrides=[f"{k}={v}" for k, v in settings.items()])
    return GroupHost(config, table, str(tmp_path), 1, replacement=False, names=names)


def hold(table, slot: int, topic: str, partition: int) -> None:
    """This broker holds ``topic`` ``partition`` (a live slot of its partition table)."""
    table.write(slot, state=ONLINE, name=topic, partition=partition, owner=0)
    table.bump_generation()


def test_hostile_assignments_publish_no_count(client, names):
    client.create(replica_nodes.assignment_path("good"),
                  replica_nodes.encode_assignment({p: [1, 2] for p in range(7)}), makepath=True)
    client.create(replica_nodes.assignment_path("wide"),
                  replica_nodes.encode_assignment({p: [1] for p in range(50)}))
    client.create("/brokers/topics/garbage", b"{not json")
    client.create("/brokers/topics/huge", b"x" * 5000)
    client.create("/brokers/topics/gap", b'{"version":1,"partitions":{"0":[1],"9":[1]}}')
    client.create("/brokers/topics/old07", b"")  # a 0.7-style topic: no value, not replicated
    reader(client, names, **{"node.bytes": 1024, "partitions.per.registration": 20}
           ).read_and_publish(client)
    assert names.partition_counts() == {"good": 7, "wide": 0, "garbage": 0, "huge": 0,
                                        "gap": 0}
    for topic in ("good", "wide", "garbage", "huge", "gap"):
        assert names.replicated(topic) is True


def test_the_published_table_is_bounded(names):
    assert names.partition_counts() is None  # nothing published yet
    names.publish({f"t{i:02d}": i for i in range(20)})  # capacity 8
    counts = names.partition_counts()
    assert counts == {f"t{i:02d}": i for i in range(8)}
    assert names.snapshot()[0] == INCOMPLETE
    long_name = "n" * 300  # longer than an entry holds: a hash only
    names.publish({long_name: 3, "short": 2**40})
    assert names.partition_counts() == {"short": 2**32 - 1}
    assert names.replicated(long_name) is True


def test_the_coordinator_counts_replicated_topics_by_their_assignment(table, names, tmp_path,
                                                                     capsys):
    groups = host(table, names, tmp_path, **{"max.partitions": 64})
    hold(table, 0, "rep", 1)  # a replica of partition 1 only
    hold(table, 1, "plain", 2)
    hold(table, 2, "unread", 0)
    groups.tick()
    assert groups.state.partitions == {"rep": 2, "plain": 3, "unread": 1}
    names.publish({"rep": 6, "unread": 0, "elsewhere": 4, "vast": 10_000})
    groups.tick()
    # the assignment's count; no count known: this broker's own; over max.partitions: cut
    assert groups.state.partitions == {"rep": 6, "plain": 3, "unread": 1, "elsewhere": 4,
                                       "vast": 64}
    groups.tick()
    assert capsys.readouterr().err.count("'vast' has 10000 partitions") == 1
    # an unfinished write: the counts stay as they were until it is whole
    names._u64[2] += 1
    groups.tick()
    assert groups.state.partitions["rep"] == 6 and "elsewhere" in groups.state.partitions
    names._u64[2] += 1
    names.publish({"rep": 6})  # "elsewhere" deleted, "vast" too
    groups.tick()
    assert groups.state.partitions == {"rep": 6, "plain": 3, "unread": 1}
    assert groups.said_over == set()  # what is said once is not kept for deleted topics
    groups.close()


def test_a_registrar_restarted_after_dying_mid_write_publishes_again(names):
    names.publish({"a": 2})
    names._u64[2] += 1  # died mid-write: seq left odd
    assert names.partition_counts() is None and names.replicated("a") is None
    names.publish({"a": 3, "b": 1})  # the restarted registrar's first view
    assert names.seq % 2 == 0
    assert names.partition_counts() == {"a": 3, "b": 1}
    assert names.replicated("b") is True and names.replicated("c") is False
