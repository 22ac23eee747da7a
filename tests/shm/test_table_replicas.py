"""The partition slot's replication fields and the ISR commit table."""

from __future__ import annotations

import pytest

from hostbroker.shm.partitions import (
    MAX_REPLICAS, ONLINE, ROLE_FOLLOWER, ROLE_LEADER, ROLE_PLAIN, ROLE_STOPPED, IsrCommitTable,
    PartitionTable, isr_bits, isr_members, replica_fields)
from hostbroker.shm.region import LayoutError


@pytest.fixture
def table(created):
    return created(PartitionTable, "partitions", 8)


def test_a_slot_is_plain_until_claimed_as_a_replica(table):
    table.write(0, state=ONLINE, name="t", partition=0, owner=0)
    s = table.read(0)
    assert s.role == ROLE_PLAIN and not s.replicated and s.replicas == ()
    assert s.readable_end == s.end_offset


def test_a_claimed_replica_is_stopped_with_its_replicas_and_leader(table):
    table.claim_replica(3, [5, 0, 9], leader=-1, leader_epoch=4, state=ONLINE, name="r",
                        partition=7, owner=1, start_offset=0, end_offset=0, flushed_offset=0,
                        segment_generation=1)
    s = table.read(3)
    assert (s.role, s.leader, s.leader_epoch, s.replicas) == (ROLE_STOPPED, -1, 4, (5, 0, 9))
    assert (s.name, s.partition, s.owner, s.state) == ("r", 7, 1, ONLINE)
    # its writer makes it the leader, with an ISR and a high watermark
    table.write(3, role=ROLE_LEADER, leader=5, leader_epoch=5, isr=isr_bits(s.replicas, [5, 9]),
                isr_wanted=isr_bits(s.replicas, [5, 0, 9]), high_watermark=10, end_offset=30,
                epoch_start=30)
    s = table.read(3)
    assert s.isr_ids == (5, 9) and s.isr_wanted_ids == (5, 0, 9)
    assert s.readable_end == 10 and s.epoch_start == 30


def test_freeing_resets_the_replication_fields(table):
    table.claim_replica(2, [1, 2], leader=1, leader_epoch=3, role=ROLE_FOLLOWER, state=ONLINE,
                        name="r", partition=0, owner=0)
    table.write(2, high_watermark=99, isr=3)
    table.free(2)
    table.write(2, state=ONLINE, name="plain", partition=0, owner=0)  # a CREATE_TOPIC's claim
    s = table.read(2)
    assert (s.role, s.replicas, s.high_watermark, s.isr, s.leader) == (ROLE_PLAIN, (), 0, 0, -1)


def test_bad_replica_lists_are_refused(table):
    with pytest.raises(ValueError, match="at most 8"):
        replica_fields(list(range(MAX_REPLICAS + 1)))
    with pytest.raises(ValueError, match="twice"):
        replica_fields([1, 1])
    with pytest.raises(ValueError, match="broker ids"):
        replica_fields([-1])
    with pytest.raises(ValueError, match="claimed"):
        table.claim_replica(0, [1], role=ROLE_LEADER)
    assert table.read(0).state == 0  # nothing written
    full = list(range(10, 10 + MAX_REPLICAS))
    table.claim_replica(1, full, state=ONLINE, name="r", partition=0, owner=0)
    assert table.read(1).replicas == tuple(full)


def test_isr_bitmaps():
    replicas = [4, 2, 7]
    assert isr_bits(replicas, [7, 4, 99]) == 0b101
    assert isr_members(replicas, 0b101) == (4, 7)
    assert isr_members(replicas, 0xFFFFFFFF) == (4, 2, 7)


def test_isr_commits_are_written_by_one_and_read_by_another(names):
    commits = IsrCommitTable.create(names("isr_commits"), 4)
    try:
        other = IsrCommitTable.attach(names("isr_commits"))
        assert other.read(2).state == 0
        commits.commit(2, version=17, isr_bits=0b11, leader_epoch=6)
        assert tuple(other.read(2)) == (1, 17, 0b11, 6)
        commits.clear(2)
        assert other.read(2).state == 0
        other.close()
        with pytest.raises(LayoutError):
            PartitionTable.attach(names("isr_commits"))
    finally:
        commits.close()


def test_under_replicated_replicas_across_log_dirs(table):
    """The one definition /metrics and hostbroker top share: no ONLINE leader,
    or the leader of the highest epoch has an ISR short of its replicas."""
    from hostbroker.shm.partitions import OFFLINE, PLACEMENT_LOG_DIRS, under_replicated

    for slot, owner in ((0, 0), (1, 1), (2, 2)):
        table.claim_replica(slot, [10, 11, 12], leader=10, leader_epoch=1, state=ONLINE,
                            name="r", partition=0, owner=owner, placement=PLACEMENT_LOG_DIRS)

    def read():
        return [table.read(i) for i in range(3)]

    assert under_replicated(read())  # all stopped: no leader
    everyone = isr_bits([10, 11, 12], [10, 11, 12])
    table.write(0, role=ROLE_LEADER, isr=everyone)
    assert not under_replicated(read())
    table.write(0, isr=isr_bits([10, 11, 12], [10, 12]))
    assert under_replicated(read())
    # an older leader left behind does not hide the newer one's short ISR, nor
    # the other way round
    table.write(1, role=ROLE_LEADER, leader_epoch=2, isr=everyone)
    assert not under_replicated(read())
    table.write(1, isr=isr_bits([10, 11, 12], [11]))
    table.write(0, isr=everyone)
    assert under_replicated(read())
    # a leader whose dir went offline leads nothing
    table.write(1, isr=everyone, state=OFFLINE)
    table.write(0, state=OFFLINE)
    assert under_replicated(read())
    assert under_replicated([])
