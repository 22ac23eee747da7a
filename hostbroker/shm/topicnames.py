"""The names of the cluster's replicated topics and their partition counts, as
ZooKeeper last told this broker's registrar (cluster mode).

Owns: one shared structure (``plan.replicated_names_name``), written by
``hb-registrar`` (hostbroker/workers/registrar_names.py) but for one word
the handlers write (``wanted``), and read lock-free by

- the handlers, whose auto-create and CREATE_TOPIC refuse a name in it: a
  broker holding no replica of a replicated topic never makes a plain topic
  of that name (hostbroker/workers/handler_topics.py; :meth:`replicated`).
  An auto-create goes by a view read from ZooKeeper *after* the produce
  first asked for the name (``as_of``): a client that learnt of a
  replicated topic (its state node, another broker's METADATA) may reach
  this broker before the watch of ``/brokers/topics`` has; the handler
  asks for a read (:meth:`want_fresh`) and answers the produce
  LEADER_NOT_AVAILABLE (retriable) until one is published;
- the group coordinator, which deals out a replicated topic's partitions by
  the count of its assignment in ZooKeeper, not by the replicas this broker
  happens to hold (hostbroker/workers/coordinator/groups.py;
  :meth:`partition_counts`).

The supervisor creates it in every mode and unlinks it with the rest.

Layout::

    offset  size  field
    0       4     magic ``b"RNAM"``
    4       4     version
    8       4     capacity   slots for names (``zookeeper.max.children``)
    12      4     topics     entries stored in the topic list
    16      8     seq        even: stable; odd: the registrar is writing
    24      4     state      UNPUBLISHED 0 (no view of ZooKeeper yet),
                             COMPLETE 1, INCOMPLETE 2 (ZooKeeper holds more
                             topics than were read, or more than fit: every
                             name not held here counts as replicated)
    28      4     count      hashes stored
    32      8     as_of      CLOCK_MONOTONIC ns when the read of ZooKeeper behind
                             the published view began (written after the view)
    40      8     wanted     CLOCK_MONOTONIC ns a handler wants a view read
                             since (the handlers' one word; the largest asked)
    48      8 × capacity     64-bit hashes of the names (:func:`name_hash`), sorted
    ...     264 × capacity   the topic list, by name: per topic ``partitions``
                             u32 (the assignment's partition count; 0 when its
                             node could not be read), ``name_len`` u32, the name
                             (UTF-8, at most 256 bytes)

A reader copies the words between two reads of ``seq`` and tries again when
they differ (a seqlock: the writer makes ``seq`` odd, writes, makes it even;
a registrar restarted after dying mid-write finds it odd and ends its first
write on the next even value).
A hash stands for a name: two names with one hash only make the second one
count as replicated too, which refuses a creation and never allows one.

Bounded whatever ZooKeeper holds: at most ``capacity`` names and entries
(more make the view INCOMPLETE, and a topic left out of the list has no
count), a name longer than 256 bytes is kept as a hash only, and a count is
at most what ``registrar_names.py`` accepts of an assignment
(``zookeeper.max.partitions.per.registration``).
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Iterable, Mapping

from hostbroker.shm.region import SharedRegion, Structure, tag_magic

UNPUBLISHED = 0
COMPLETE = 1
INCOMPLETE = 2

_HEADER = 48
_SEQ = 2  # u64 index of seq
_AS_OF = 4  # u64 index of as_of
_WANTED = 5  # u64 index of wanted
_STATE_COUNT = struct.Struct("<II")
_STATE_AT = 24
_CAPACITY = struct.Struct("<I")
_TOPICS_AT = 12
_TOPICS = struct.Struct("<I")
_ENTRY = struct.Struct("<II256s")  # partitions, name_len, name
MAX_NAME_BYTES = 256
_READ_TRIES = 1000


def name_hash(name: str) -> int:
    """The 64-bit hash that stands for a topic name."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")


class ReplicatedNames(Structure):
    """The replicated topic names (see the module docstring)."""

    MAGIC = tag_magic(b"RNAM")
    VERSION = 3  # 2: the topic list and its partition counts; 3: as_of and wanted

    def __init__(self, region: SharedRegion, opened: bool):
        super().__init__(region, opened)
        self._check_stamp()
        self.capacity = _CAPACITY.unpack_from(region.buf, 8)[0]
        if region.size < self.region_size(self.capacity):
            raise ValueError(f"{region.name}: too small for {self.capacity} names")
        self._buf = region.buf
        self._u64 = self._view(0, self.region_size(self.capacity), "Q")
        self._entries_at = _HEADER + 8 * self.capacity
        self._cache: tuple[int, int, frozenset[int]] | None = None
        self._counts: tuple[int, dict[str, int]] | None = None

    @staticmethod
    def region_size(capacity: int) -> int:
        return _HEADER + (8 + _ENTRY.size) * capacity

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, capacity: int) -> "ReplicatedNames":
        if not 1 <= capacity < 2**32:
            raise ValueError(f"capacity {capacity} not in 1..2^32-1")
        region, opened = cls._open(region_or_name, cls.region_size(capacity))
        buf = region.buf
        buf[:cls.region_size(capacity)] = bytes(cls.region_size(capacity))
        _CAPACITY.pack_into(buf, 8, capacity)
        cls._stamp(buf)
        return cls(region, opened)

    @classmethod
    def attach(cls, region_or_name: SharedRegion | str, readonly: bool = False) -> "ReplicatedNames":
        return cls._attach(region_or_name, readonly)

    # -- the registrar ------------------------------------------------------------
    def publish(self, topics: Mapping[str, int] | Iterable[str], complete: bool = True) -> None:
        """Store ``topics`` as the whole set: ``{name: partition count}`` (0: not
        known), or names alone (counts not known); ``complete`` False when
        ZooKeeper held more than were read. More names than fit: the first
        ``capacity`` of them, marked INCOMPLETE."""
        if not isinstance(topics, Mapping):
            topics = dict.fromkeys(topics, 0)
        hashes = sorted({name_hash(n) for n in topics})
        entries = sorted(topics.items())
        if len(hashes) > self.capacity or len(entries) > self.capacity:
            hashes, entries = hashes[:self.capacity], entries[:self.capacity]
            complete = False
        u64 = self._u64
        start = u64[_SEQ] | 1  # odd: writing (a registrar that died writing left it odd)
        u64[_SEQ] = start
        for i, h in enumerate(hashes):
            u64[_HEADER // 8 + i] = h
        stored = 0
        for name, count in entries:
            encoded = name.encode("utf-8", "surrogatepass")
            if len(encoded) > MAX_NAME_BYTES:
                continue  # a hash only: counts as replicated, with no count
            _ENTRY.pack_into(self._buf, self._entries_at + stored * _ENTRY.size,
                             min(max(int(count), 0), 2**32 - 1), len(encoded), encoded)
            stored += 1
        _TOPICS.pack_into(self._buf, _TOPICS_AT, stored)
        _STATE_COUNT.pack_into(self._buf, _STATE_AT, COMPLETE if complete else INCOMPLETE,
                               len(hashes))
        u64[_SEQ] = start + 1  # even: stable, and never a value read before

    def mark_read(self, began_ns: int) -> None:
        """The view now published reflects ZooKeeper as of a read that began at
        ``began_ns`` (``time.monotonic_ns()``); after :meth:`publish`, so a
        reader that sees the stamp sees that view or a newer one."""
        if began_ns > self._u64[_AS_OF]:
            self._u64[_AS_OF] = began_ns

    @property
    def as_of_ns(self) -> int:
        return self._u64[_AS_OF]

    @property
    def wanted_ns(self) -> int:
        return self._u64[_WANTED]

    # -- the coordinator -------------------------------------------------------------
    @property
    def seq(self) -> int:
        """Moves with every publication (odd while one is being written)."""
        return self._u64[_SEQ]

    def partition_counts(self) -> dict[str, int] | None:
        """``{topic: partition count}`` of the replicated topics as last published
        (cached until it changes; a count of 0: not known); None before the first
        view, or while a write stays unfinished."""
        u64 = self._u64
        for attempt in range(_READ_TRIES):
            seq = u64[_SEQ]
            cached = self._counts
            if cached is not None and cached[0] == seq:
                return cached[1]
            if seq & 1 == 0:
                state = _STATE_COUNT.unpack_from(self._buf, _STATE_AT)[0]
                stored = min(_TOPICS.unpack_from(self._buf, _TOPICS_AT)[0], self.capacity)
                raw = bytes(self._buf[self._entries_at:self._entries_at + stored * _ENTRY.size])
                if u64[_SEQ] == seq:
                    if state == UNPUBLISHED:
                        return None
                    counts = {}
                    for count, length, name in _ENTRY.iter_unpack(raw):
                        try:
                            counts[name[:length].decode("utf-8", "surrogatepass")] = count
                        except UnicodeDecodeError:
                            continue  # not the registrar's write: no count
                    self._counts = (seq, counts)
                    return counts
            if attempt > 10:
                time.sleep(0.0001)
        return None

    # -- the handlers --------------------------------------------------------------
    def snapshot(self) -> tuple[int, frozenset[int]]:
        """``(state, hashes)`` as last published (cached until it changes)."""
        u64 = self._u64
        for attempt in range(_READ_TRIES):
            seq = u64[_SEQ]
            cache = self._cache
            if cache is not None and cache[0] == seq:
                return cache[1], cache[2]
            if seq & 1 == 0:
                state, count = _STATE_COUNT.unpack_from(self._buf, _STATE_AT)
                count = min(count, self.capacity)
                hashes = frozenset(u64[_HEADER // 8:_HEADER // 8 + count])
                if u64[_SEQ] == seq:
                    self._cache = (seq, state, hashes)
                    return state, hashes
            if attempt > 10:
                time.sleep(0.0001)
        return UNPUBLISHED, frozenset()  # the registrar never finished a write: as not read

    def want_fresh(self, since_ns: int) -> None:
        """A handler wants a view read from ZooKeeper at or after ``since_ns``
        (the registrar reads when ``wanted`` is past ``as_of``). Handlers race
        on this one word: a smaller value written over a larger one only delays
        the larger one's read until it is asked again."""
        if since_ns > self._u64[_WANTED]:
            self._u64[_WANTED] = since_ns

    def replicated(self, topic: str) -> bool | None:
        """Whether ``topic`` counts as replicated (it is, or the view is
        incomplete, or another name has its hash); None before the first view."""
        state, hashes = self.snapshot()
        if state == UNPUBLISHED:
            return None
        return state != COMPLETE or name_hash(topic) in hashes
