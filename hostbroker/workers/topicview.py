"""A handler's cached picture of the partition table (part of ``hb-handler-N``).

Owns nothing shared: it reads the partition table lock-free, the log dir
table's ids (:func:`log_dir_table`), each partition's
``partition.json`` and its segment directory listing, and caches them per
handler process until the table's generation (topics) or a slot's segment
generation (segments) moves.

A partition with replicas across log dirs (``placement`` PLACEMENT_LOG_DIRS,
docs/storage.md) has one slot per replica, all with its ``(name,
partition)``. The view keeps one *serving slot* for it, the one
:meth:`TopicView.slot` gives, so every reader (produce, fetch, OFFSETS,
METADATA) looks at that one alone: the ONLINE leader with the highest leader
epoch; with none, the first ONLINE replica in replica order (it answers
NOT_LEADER_FOR_PARTITION, retriable); with no replica ONLINE, the first
(STORAGE_ERROR). ``hb-logdirs`` bumps the table's generation after moving a
leadership, but that can come before the writers have taken their new roles
(the old leader still leading, the new one not yet): so :meth:`TopicView.slot`
reads a dir-placed partition's serving slot and chooses again whenever it is
not an ONLINE leader (a read of about a microsecond, only for such
partitions).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from hostbroker.errors import HostbrokerError
from hostbroker.log.config import LogConfig
from hostbroker.log.partition_file import read_partition_file
from hostbroker.log.segments import list_segment_bases, partition_dirname, segment_filename
from hostbroker.shm import partitions as ptable
from hostbroker.shm.logdirs import LogDirTable
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.table import TornSlotError

_MAX_PATHS = 65536
_LIVE = (ptable.ONLINE, ptable.OFFLINE, ptable.CREATING)


def serving_slot(table: PartitionTable, slots: Sequence[int]) -> tuple[int, bool]:
    """``(slot, leads)``: which of a dir-placed partition's replica ``slots``
    (in replica order) serves it, as the module docstring says, and whether
    that one is an ONLINE leader."""
    best, best_epoch, online = None, -1, None
    for slot in slots:
        try:
            s = table.read(slot)
        except TornSlotError:
            continue  # (its writer died mid-write: not the one to serve)
        if s.state != ptable.ONLINE:
            continue
        if s.role == ptable.ROLE_LEADER and s.leader_epoch > best_epoch:
            best, best_epoch = slot, s.leader_epoch
        elif online is None:
            online = slot
    if best is not None:
        return best, True
    return (online if online is not None else slots[0]), False


def log_dir_table(plan) -> LogDirTable | None:
    """The broker's log dir table (``plan.logdirs_name``), read-only, for a
    view's replica order: None when the plan names none or it cannot be
    attached (replicas are then ordered by writer index)."""
    name = getattr(plan, "logdirs_name", None)
    if not name:
        return None
    try:
        return LogDirTable.attach(name, readonly=True)
    except (OSError, ValueError):
        return None


class TopicView:
    """This handler's cached picture of the partition table: topic -> slots.

    Rebuilt whenever the table's generation moves (a topic was created or
    deleted); per-slot offsets are always read fresh from the table.
    """

    def __init__(self, table: PartitionTable, log_dirs: Sequence[str], defaults: LogConfig,
                 logdirs=None):
        self.table = table
        # the LogDirTable (shm/logdirs.py): each writer's log dir id, which orders
        # a dir-placed partition's replicas (None: ordered by writer index)
        self.logdirs = logdirs
        self.log_dirs = log_dirs
        self.defaults = defaults
        self.generation = -1
        self.topics: dict[str, list[int | None]] = {}
        # slots of replicated partitions (a role other than PLAIN, set when the
        # slot is claimed and kept until it is freed)
        self.replicated: frozenset[int] = frozenset()
        # slots of partitions with replicas across log dirs, and each such
        # partition's slots in replica order
        self.dirs_placed: frozenset[int] = frozenset()
        self._replica_slots: dict[tuple[str, int], tuple[int, ...]] = {}
        self._configs: dict[tuple[int, str], LogConfig] = {}
        self._segments: dict[int, tuple[int, list[int]]] = {}
        self._paths: dict[tuple[int, int], str] = {}  # (slot, base) -> segment file path

    def refresh(self) -> None:
        gen = self.table.generation
        if gen == self.generation:
            return
        topics: dict[str, dict[int, int]] = {}
        replicated = []
        placed: dict[tuple[str, int], list] = {}
        for i, s in self.table.scan():
            if s.state not in _LIVE:
                continue
            if s.placement == ptable.PLACEMENT_LOG_DIRS:
                placed.setdefault((s.name, s.partition), []).append((i, s))
                replicated.append(i)
                continue
            topics.setdefault(s.name, {})[s.partition] = i
            if s.role != ptable.ROLE_PLAIN:
                replicated.append(i)
        self._replica_slots = {}
        for key, found in placed.items():
            slots = self._replica_slots[key] = self._replica_order(found)
            topics.setdefault(key[0], {})[key[1]] = serving_slot(self.table, slots)[0]
        self.replicated = frozenset(replicated)
        self.dirs_placed = frozenset(i for slots in self._replica_slots.values() for i in slots)
        self.topics = {t: [parts.get(p) for p in range(max(parts) + 1)]
                       for t, parts in topics.items()}
        self.generation = gen
        # a slot freed and taken by another topic must not keep the old one's data
        self._configs.clear()
        self._segments.clear()
        self._paths.clear()

    def _replica_order(self, found: list) -> tuple[int, ...]:
        """The slots of one dir-placed partition's replicas, ``(slot, record)``
        each, in the order of its replica list (the leader's, or the one of
        the highest leader epoch): a replica's place is that of its writer's
        log dir id; one not in the list (or with no id known) comes after, by
        writer index."""
        ref = max(found, key=lambda x: (x[1].role == ptable.ROLE_LEADER, x[1].leader_epoch))[1]
        order = ref.replicas
        logdirs = self.logdirs

        def place(item) -> tuple[int, int]:
            owner = item[1].owner
            dir_id = logdirs.dir_id(owner) if logdirs is not None else -1
            return (order.index(dir_id) if dir_id in order else len(order), owner)

        return tuple(i for i, _ in sorted(found, key=place))

    def slot(self, topic: str, partition: int) -> int | None:
        slots = self.topics.get(topic)
        if slots is None or not 0 <= partition < len(slots):
            return None
        slot = slots[partition]
        if slot in self.dirs_placed:
            s = self.table.read(slot)
            if s.state != ptable.ONLINE or s.role != ptable.ROLE_LEADER:
                # (no leader when last chosen, or a leadership moved since)
                slot = slots[partition] = serving_slot(
                    self.table, self._replica_slots[(topic, partition)])[0]
        return slot

    def replica_slots(self, topic: str, partition: int) -> tuple[int, ...]:
        """Every slot of the partition in replica order: a dir-placed
        partition's replicas, or the one slot of any other (() for none)."""
        slots = self._replica_slots.get((topic, partition))
        if slots is not None:
            return slots
        slot = self.slot(topic, partition)
        return () if slot is None else (slot,)

    def partition_path(self, s) -> str:
        return os.path.join(self.log_dirs[s.owner], partition_dirname(s.name, s.partition))

    def segment_path(self, slot: int, s, base: int) -> str:
        """The path of the slot's segment at ``base`` (a fetch names one per
        partition; joining it afresh each time costs more than the fetch's
        arithmetic). Cached until the table's generation moves, which it does
        before a slot serves another topic."""
        key = (slot, base)
        path = self._paths.get(key)
        if path is None:
            if len(self._paths) >= _MAX_PATHS:
                self._paths.clear()
            path = self._paths[key] = os.path.join(self.partition_path(s), segment_filename(base))
        return path

    def config(self, slot: int, s) -> LogConfig:
        key = (slot, s.name)
        cfg = self._configs.get(key)
        if cfg is None:
            try:
                # checked as the writer checks it: no link, bounded, any content
                overrides = read_partition_file(self.partition_path(s))[3]
                cfg = self.defaults.with_overrides(overrides)
            except (OSError, ValueError, HostbrokerError):
                cfg = self.defaults
            self._configs[key] = cfg
        return cfg

    def segment_bases(self, slot: int, s) -> list[int]:
        """Sorted base offsets of the slot's segments, listed again when the
        writer bumps the segment generation (roll, retention, truncation)."""
        cached = self._segments.get(slot)
        if cached is not None and cached[0] == s.segment_generation:
            return cached[1]
        bases = list_segment_bases(self.partition_path(s), s.start_offset, s.end_offset)
        self._segments[slot] = (s.segment_generation, bases)
        return bases
