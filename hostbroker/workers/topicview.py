"""A handler's cached picture of the partition table (part of ``hb-handler-N``).

Owns nothing shared: it reads the partition table lock-free, each partition's
``partition.json`` and its segment directory listing, and caches them per
handler process until the table's generation (topics) or a slot's segment
generation (segments) moves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from hostbroker.errors import HostbrokerError
from hostbroker.log.config import LogConfig
from hostbroker.log.partition_file import read_partition_file
from hostbroker.log.segments import (
    parse_segment_filename,
    partition_dirname,
    segment_filename,
)
from hostbroker.shm import partitions as ptable
from hostbroker.shm.partitions import PartitionTable

_MAX_PATHS = 65536


class TopicView:
    """This handler's cached picture of the partition table: topic -> slots.

    Rebuilt whenever the table's generation moves (a topic was created or
    deleted); per-slot offsets are always read fresh from the table.
    """

    def __init__(self, table: PartitionTable, log_dirs: Sequence[str], defaults: LogConfig):
        self.table = table
        self.log_dirs = log_dirs
        self.defaults = defaults
        self.generation = -1
        self.topics: dict[str, list[int | None]] = {}
        # slots of replicated partitions (a role other than PLAIN, set when the
        # slot is claimed and kept until it is freed)
        self.replicated: frozenset[int] = frozenset()
        self._configs: dict[tuple[int, str], LogConfig] = {}
        self._segments: dict[int, tuple[int, list[int]]] = {}
        self._paths: dict[tuple[int, int], str] = {}  # (slot, base) -> segment file path

    def refresh(self) -> None:
        gen = self.table.generation
        if gen == self.generation:
            return
        topics: dict[str, dict[int, int]] = {}
        replicated = []
        for i, s in self.table.scan():
            if s.state in (ptable.ONLINE, ptable.OFFLINE, ptable.CREATING):
                topics.setdefault(s.name, {})[s.partition] = i
                if s.role != ptable.ROLE_PLAIN:
                    replicated.append(i)
        self.replicated = frozenset(replicated)
        self.topics = {t: [parts.get(p) for p in range(max(parts) + 1)]
                       for t, parts in topics.items()}
        self.generation = gen
        # a slot freed and taken by another topic must not keep the old one's data
        self._configs.clear()
        self._segments.clear()
        self._paths.clear()

    def slot(self, topic: str, partition: int) -> int | None:
        slots = self.topics.get(topic)
        if slots is None or not 0 <= partition < len(slots):
            return None
        return slots[partition]

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
        bases = []
        for name in os.listdir(self.partition_path(s)):
            base = parse_segment_filename(name)
            if base is not None and base <= s.end_offset:
                bases.append(base)
        bases.sort()
        # keep only the segments that hold the log as published (drop ones deleted
        # meanwhile by retention, whose bases fall below the start offset)
        bases = [b for b in bases if b >= s.start_offset] or [s.start_offset]
        if bases[0] > s.start_offset:
            bases.insert(0, s.start_offset)
        self._segments[slot] = (s.segment_generation, bases)
        return bases
