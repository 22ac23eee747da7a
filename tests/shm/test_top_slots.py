"""What ``hostbroker top`` reads of the partition table between two of its
readings (``top.Slots``): the table scanned again only when its generation
moves, and yet every state change, and every ISR change of a replica across
log dirs, seen at the next reading. Real shared tables."""

from __future__ import annotations

import itertools
import os

import pytest

from hostbroker import top
from hostbroker.shm.partitions import (
    OFFLINE,
    ONLINE,
    PLACEMENT_LOG_DIRS,
    ROLE_LEADER,
    PartitionTable,
    isr_bits,
)
from hostbroker.shm.region import broker_prefix, region_name, remove_stale

_runs = itertools.count()


@pytest.fixture
def table():
    token = f"t{os.getpid()}topslots{next(_runs)}"
    made = PartitionTable.create(region_name(token, "partitions", 0), 64)
    yield made
    made.close()
    remove_stale(broker_prefix(token))


def _plain(table, slot, topic, p):
    table.write(slot, state=ONLINE, name=topic, partition=p, owner=0)


def _names(found):
    return sorted((i, s.name, s.partition, int(s.state)) for i, s in found)


def test_slots_follow_the_table_between_two_scans(table):
    for p in range(4):
        _plain(table, p, "t", p)
    table.bump_generation()
    slots = top.Slots(table)
    assert _names(slots.scan()) == _names(table.scan())

    # a state changes in place (no new generation): seen at the next reading
    table.write(2, state=OFFLINE)
    assert _names(slots.scan()) == _names(table.scan())
    assert top.offline(table, ["/d0"], slots=slots.scan())["offline_partitions"] == [
        {"topic": "t", "partition": 2, "log_dir": "/d0"}]

    # a slot freed (before its writer bumps the generation) is gone at once
    table.free(3)
    assert [i for i, _ in slots.scan()] == [0, 1, 2]

    # a topic added: seen once its creator bumps the generation, as every reader
    _plain(table, 5, "u", 0)
    table.bump_generation()
    assert _names(slots.scan()) == _names(table.scan())
    assert (5, "u", 0, int(ONLINE)) in _names(slots.scan())


def test_a_replica_across_log_dirs_is_read_again_for_its_isr(table):
    table.claim_replica(0, [1, 2], leader=1, leader_epoch=1, placement=PLACEMENT_LOG_DIRS,
                        state=ONLINE, name="r", partition=0, owner=0)
    table.write(0, role=ROLE_LEADER, leader=1, leader_epoch=1, isr=isr_bits([1, 2], [1, 2]))
    table.claim_replica(1, [1, 2], leader=1, leader_epoch=1, placement=PLACEMENT_LOG_DIRS,
                        state=ONLINE, name="r", partition=0, owner=1)
    table.bump_generation()
    slots = top.Slots(table)
    assert top.under_replicated(table, slots.scan()) == []
    # the leader's ISR shrinks in place: no new generation, no state change
    table.write(0, isr=isr_bits([1, 2], [1]))
    assert top.under_replicated(table, slots.scan()) == [["r", 0]]
    assert top.under_replicated(table, slots.scan()) == top.under_replicated(table)
