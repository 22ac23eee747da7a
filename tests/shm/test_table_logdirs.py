"""The partition slot's log dir fields and the log dir table (replicas
across this broker's log dirs)."""

from __future__ import annotations

import pytest

from hostbroker.shm.logdirs import (LD_ONLINE, LD_REOPENING, NO_DIR_ID,
                                    LogDirTable)
from hostbroker.shm.partitions import (NO_SLOT, ONLINE, PARTITION_LAYOUT, PLACEMENT_BROKERS,
                                       PLACEMENT_LOG_DIRS, ROLE_FOLLOWER, PartitionTable)
from hostbroker.shm.region import LayoutError
from hostbroker.shm.table import SlotTable


@pytest.fixture
def table(created):
    return created(PartitionTable, "partitions", 8)


def test_the_log_dir_fields_come_after_the_name_and_move_nothing():
    offsets = {name: at for name, (at, _) in PARTITION_LAYOUT._writers.items()}
    assert PARTITION_LAYOUT.slot_size == 448
    # what figures() reads by position stays where it was
    assert (offsets["state"], offsets["owner"], offsets["start_offset"],
            offsets["end_offset"], offsets["name"]) == (8, 16, 24, 32, 128)
    assert (offsets["placement"], offsets["fetch_epoch"], offsets["leader_slot"]) == \
        (384, 388, 392)


def test_a_dir_placed_replica_is_claimed_with_no_leader_slot_nor_fetch_epoch(table):
    table.claim_replica(2, [3, 1], placement=PLACEMENT_LOG_DIRS, state=ONLINE, name="r",
                        partition=0, owner=1)
    s = table.read(2)
    assert s.dirs_placed and s.placement == PLACEMENT_LOG_DIRS
    assert (s.replicas, s.fetch_epoch, s.leader_slot) == ((3, 1), -1, NO_SLOT)
    # its writer follows the leader in slot 5, cut to it in epoch 4
    table.write(2, role=ROLE_FOLLOWER, leader=3, leader_epoch=4, leader_slot=5, fetch_epoch=4)
    s = table.read(2)
    assert (s.leader_slot, s.fetch_epoch, s.name) == (5, 4, "r")
    assert table.figures()[2] == (ONLINE, 0, 0, 1)


def test_a_cluster_replica_and_a_freed_slot_are_placed_on_brokers(table):
    table.claim_replica(0, [7, 8], state=ONLINE, name="c", partition=0, owner=0)
    assert table.read(0).placement == PLACEMENT_BROKERS and not table.read(0).dirs_placed
    table.claim_replica(1, [1, 2], placement=PLACEMENT_LOG_DIRS, state=ONLINE, name="r",
                        partition=0, owner=0)
    table.write(1, leader_slot=4, fetch_epoch=9)
    table.free(1)
    table.write(1, state=ONLINE, name="plain", partition=0, owner=0)
    s = table.read(1)
    assert (s.placement, s.leader_slot, s.fetch_epoch) == (PLACEMENT_BROKERS, NO_SLOT, -1)
    with pytest.raises(ValueError, match="placement"):
        table.claim_replica(3, [1], placement=2)
    assert table.read(3).state == 0


def test_a_table_of_the_version_before_is_refused(names):
    """A broker of the version before (384-byte slots, table version 2) left
    its table: it is not attached as one of these."""
    name = names("partitions")
    old = SlotTable.create(name, 4, PARTITION_LAYOUT)  # stamped with the slot tables' version
    try:
        with pytest.raises(LayoutError, match="version"):
            PartitionTable.attach(name)
    finally:
        old.close()


# -- the log dir table -------------------------------------------------------

def test_the_supervisor_fills_the_ids_and_readers_find_them(names):
    name = names("logdirs")
    table = LogDirTable.create(name, [4, NO_DIR_ID, 2])
    reader = LogDirTable.attach(name, readonly=True)
    try:
        assert [reader.dir_id(i) for i in range(3)] == [4, NO_DIR_ID, 2]
        assert reader.dir_id(3) == NO_DIR_ID and reader.dir_id(-1) == NO_DIR_ID
        assert [reader.read(i).state for i in range(3)] == [LD_ONLINE] * 3  # (-1 too)
        assert reader.index_of(2) == 2 and reader.index_of(9) is None
        assert reader.index_of(NO_DIR_ID) is None
        assert reader.ids() == {0: 4, 2: 2}
        # hb-logdirs gives the new disk in dir 1 its id, and keeps the counts
        table.set_id(1, 5)
        table.set_state(1, LD_REOPENING)
        table.set_counts(0, replicas=3, leaders=2, under_replicated=1, offline_replicas=0)
        assert reader.dir_id(1) == 5 and reader.read(1).state == LD_REOPENING
        s = reader.read(0)
        assert (s.replicas, s.leaders, s.under_replicated, s.offline_replicas) == (3, 2, 1, 0)
    finally:
        reader.close()
        table.close()


def test_bad_and_repeated_ids_are_refused(names):
    with pytest.raises(ValueError, match="twice"):
        LogDirTable.create(names("logdirs", 0), [3, 3])
    for bad in (0, 2**31, -2, "1", True):
        with pytest.raises(ValueError, match="log dir id"):
            LogDirTable.create(names("logdirs", 1), [bad])
    table = LogDirTable.create(names("logdirs", 2), [1, 2])
    try:
        with pytest.raises(ValueError, match="already dir 0"):
            table.set_id(1, 1)
        assert table.dir_id(1) == 2
    finally:
        table.close()
