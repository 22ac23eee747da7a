"""Creating one replica of a replicated topic: its partition dir and its table slot.

Owns the create-and-claim step that both admins of replicas take: a handler
given a LEADER_AND_ISR for a partition it has no replica of (cluster mode,
``handler_replication``), and ``hb-logdirs`` placing the replicas of a
topic on several log dirs of this broker (``workers/logdirs/admin.py``). The
caller holds the admin lock and has chosen the log dir (``owner`` is that
dir's writer index); the slot is claimed STOPPED, and the owning writer
takes the replica's role from the OP_REPLICA_STATE that follows. Reads the
partition table and the ISR commit table, writes one slot of each, and the
new partition dir.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.partition import PartitionLog
from hostbroker.shm import partitions as ptable
from hostbroker.workers.base import now_ms

PLACEMENT_BROKERS = ptable.PLACEMENT_BROKERS
PLACEMENT_LOG_DIRS = ptable.PLACEMENT_LOG_DIRS


def create_replica(table, commits, log_dir: str, owner: int, topic: str, partition: int,
                   replicas: Sequence[int], overrides: Mapping[str, str], defaults,
                   placement: int = PLACEMENT_BROKERS, *, leader: int = -1,
                   leader_epoch: int = 0) -> int:
    """Create the replica of ``topic``-``partition`` in ``log_dir`` (writer ``owner``'s)
    and claim a free slot for it, STOPPED, naming ``replicas`` (broker ids, or log
    dir ids when ``placement`` is PLACEMENT_LOG_DIRS); returns the slot. Hold the
    admin lock. Raises :class:`HostbrokerError`: INVALID_REQUEST for a full table or
    too many replicas, INVALID_CONFIG for bad ``overrides``, TOPIC_ALREADY_EXISTS
    when the partition dir is there already, STORAGE_ERROR when the disk fails."""
    if not 1 <= len(replicas) <= ptable.MAX_REPLICAS:
        raise HostbrokerError(f"{len(replicas)} replicas: a partition has 1 to "
                              f"{ptable.MAX_REPLICAS}", ErrorCode.INVALID_REQUEST)
    try:
        defaults.with_overrides(overrides)
    except HostbrokerError as e:
        raise HostbrokerError(str(e), ErrorCode.INVALID_CONFIG) from None
    slot = table.find_free()
    if slot is None:
        raise HostbrokerError("the partition table is full (max.partitions)",
                              ErrorCode.INVALID_REQUEST)
    kind = ptable.PLACEMENT_NAMES[placement] if placement == PLACEMENT_LOG_DIRS else None
    try:
        plog = PartitionLog.create(log_dir, topic, partition, partition + 1, overrides,
                                   defaults, now_ms, replicated=True, placement=kind)
        plog.close()
    except HostbrokerError:
        raise
    except OSError as e:
        raise HostbrokerError(f"cannot create {topic}-{partition} in {log_dir}: "
                              f"{e.strerror or e}", ErrorCode.STORAGE_ERROR) from None
    if commits is not None:
        # a commit the slot's previous partition left is not the new one's
        # (IsrCommitTable: cleared by the claimer, under the admin lock)
        commits.clear(slot)
    table.claim_replica(
        slot, list(replicas), leader=leader, leader_epoch=leader_epoch,
        role=ptable.ROLE_STOPPED, state=ptable.ONLINE, name=topic, partition=partition,
        owner=owner, start_offset=0, end_offset=0, flushed_offset=0, segment_generation=1,
        placement=placement)
    return slot
