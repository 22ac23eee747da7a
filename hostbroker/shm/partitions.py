"""The partition table (``PARTITION_LAYOUT``) and its ISR commit table
(``ISR_COMMITS``): the slot layouts the broker shares between writers,
handlers and the registrar, over the seqlock slot tables of
:mod:`hostbroker.shm.table` (format, seqlock, reads and scans).

Owns: the partition slot's fields, its states and replication roles, the
replica list and ISR bitmap encodings, the offline log dir flags, and the
ISR commits. Changes that add or free slots are made under
:class:`~hostbroker.shm.adminlock.AdminLock`.

Partition slot (``PARTITION_LAYOUT``, 448 bytes)::

    offset  size  field
    0       8     seq
    8       4     state               PartitionState
    12      4     partition           i32
    16      4     owner               writer (log dir) index
    20      4     name_len            bytes of name used
    24      8     start_offset        i64, log start offset
    32      8     end_offset          i64, log end offset (next offset to assign)
    40      8     flushed_offset      i64, offsets below are fsynced
    48      8     segment_generation  bumped when segments are added or deleted
    56      8     high_watermark      i64, consumers of a replicated partition read below it
    64      4     role                u32, ROLE_PLAIN / LEADER / FOLLOWER / STOPPED
    68      4     leader              i32, broker id of the leader (-1: none known)
    72      4     leader_epoch        i32
    76      4     isr_version         i32, zk version of the state node the ISR came from
    80      4     isr                 u32, bitmap over replica indices (committed ISR)
    84      4     isr_wanted          u32, bitmap: the ISR the leader asks ZooKeeper to hold
    88      8     epoch_start         i64, start offset of the current leader epoch
    96      32    r0 .. r7            i32 x 8, replica broker ids in assignment order (-1: none)
    128     256   name                topic name, UTF-8
    384     4     placement           u32, PLACEMENT_BROKERS 0 (cluster or plain) or
                                      PLACEMENT_LOG_DIRS 1: leader, r0 .. r7 and the
                                      ISR bitmaps then name log dir ids, not brokers
    388     4     fetch_epoch         i32, a dir-placed follower: the leader epoch in
                                      which its log was cut to the divergence point,
                                      so its log below end_offset is a prefix of that
                                      leader's (-1: not yet)
    392     4     leader_slot         i32, a dir-placed follower: its leader's slot
                                      (-1: none)
    396     4     reserved            0
    400     8     claims              u64, times the slot was freed (:meth:`PartitionTable.free`)
    408     40    reserved            0

The fields before ``placement`` keep their offsets (:meth:`PartitionTable.figures`
reads them by position); the log dir fields came after ``name``.

``claims`` is outside the seqlock and the slot's record: the one who frees
the slot adds 1 after writing it FREE, and anyone loads it alone (one
aligned u64; :meth:`PartitionTable.claims`). It tells a partition that had
the slot from the one that has it now without reading the slot: each
process's partition stats row carries the value it counts under
(``shm/stats.py``), so a count left from an earlier partition is known to be
one.

Replication fields. A partition of an unreplicated topic (standalone, or a
0.7-style cluster topic) is ``ROLE_PLAIN``: the replication fields mean
nothing and its consumers read up to ``end_offset``. A replica of a
replicated topic is claimed (under the admin lock) ``ROLE_STOPPED`` with its
replicas, leader and leader epoch (:meth:`PartitionTable.claim_replica`);
from then on its owning writer alone writes every field, ``role`` included
(on the handler's OP_REPLICA_STATE). Consumers of such a partition read
below ``high_watermark``; a FOLLOWER or STOPPED one answers
NOT_LEADER_FOR_PARTITION to produce and consumer fetch. ``isr`` and
``isr_wanted`` are bitmaps over the indices of ``r0 .. r7`` (bit ``i``:
replica ``r<i>``), at most ``MAX_REPLICAS`` = 8; :func:`isr_bits` and
:func:`isr_members` convert, and a record's ``replicas``, ``isr_ids`` and
``isr_wanted_ids`` give the ids. A freed slot has every replication field
reset (:meth:`PartitionTable.free`), so a plain partition created into it
later is PLAIN.

Replicas across log dirs. On a standalone broker a replicated topic's
replicas sit on distinct log dirs of this broker, each in its own slot
(``owner`` = that dir's writer, so every slot keeps one writer): the
replicas of one partition share ``(name, partition)`` and differ in
``owner``. Such a slot is ``PLACEMENT_LOG_DIRS``: its ``leader`` and
``r0 .. r7`` are log dir ids (:mod:`hostbroker.shm.logdirs`), its ISR
bitmaps are over those. A follower among them copies from its leader's
files; ``leader_slot`` says where that leader is, and ``fetch_epoch`` says
its log was cut to the leader's in that epoch (the leader counts a
follower's position only then). Its writer writes them, as every field.

ISR commit table (``ISR_COMMITS``, layout ``b"ISRC"``, 64-byte slots, one
per partition slot, same index): ``state`` (1 once written), ``commit_version``
(the zk version of the state node the registrar wrote), ``commit_isr`` (the
bitmap it wrote), ``leader_epoch``. The registrar writes commits, the
handler claiming a partition slot for a replica clears its commit, both
under the admin lock (:class:`IsrCommitTable`); the leader's writer adopts a commit of its own
``leader_epoch`` written during its leadership (the slot's seq moved since)
at a newer ``commit_version`` than its ``isr_version``: what ZooKeeper holds.

The partition table's user words are a bitmap of offline log dirs: bit ``i``
of byte ``32 + i // 8`` is set while log dir ``i`` cannot be used at all (its
writer could not open it, or a write or flush failed), so handlers place no
new partition there and ``hostbroker top`` shows it. Writers change it under
the :class:`~hostbroker.shm.adminlock.AdminLock` (a read-modify-write of a shared byte); readers load one
byte. It holds ``MAX_FLAGGED_LOG_DIRS`` log dirs; the partitions of any later
one are still marked OFFLINE one by one.

Partition states: a partition whose files were found damaged at start
(``logdir.py``) is OFFLINE like those of a failed log dir, and answers
STORAGE_ERROR; its offsets are 0.
"""

from __future__ import annotations

import enum
import struct
from collections import namedtuple
from collections.abc import Sequence

from hostbroker.shm.region import SharedRegion
from hostbroker.shm.table import FREE, TABLE_HEADER_SIZE, SlotLayout, SlotTable

_ODD = bytes(i & 1 for i in range(256))  # a byte -> 1 if odd, for bytes.translate



class PartitionState(enum.IntEnum):
    FREE = 0
    CREATING = 1
    ONLINE = 2
    OFFLINE = 3
    DELETING = 4


CREATING = PartitionState.CREATING
ONLINE = PartitionState.ONLINE
OFFLINE = PartitionState.OFFLINE
DELETING = PartitionState.DELETING

# replication: a slot's role (module docstring)
ROLE_PLAIN = 0  # unreplicated: standalone and 0.7-style cluster topics
ROLE_LEADER = 1
ROLE_FOLLOWER = 2
ROLE_STOPPED = 3  # a replica with no leadership known yet (after a start, or STOP_REPLICA)
ROLES = (ROLE_PLAIN, ROLE_LEADER, ROLE_FOLLOWER, ROLE_STOPPED)
ROLE_NAMES = {ROLE_PLAIN: "plain", ROLE_LEADER: "leader", ROLE_FOLLOWER: "follower",
              ROLE_STOPPED: "stopped"}
MAX_REPLICAS = 8  # r0 .. r7; the isr bitmaps have a bit per replica index
REPLICA_FIELDS = tuple(f"r{i}" for i in range(MAX_REPLICAS))
NO_REPLICA = -1

# a slot's placement: what its leader, r0 .. r7 and ISR bitmaps name
PLACEMENT_BROKERS = 0  # broker ids: a cluster replica (and every plain slot)
PLACEMENT_LOG_DIRS = 1  # log dir ids of this broker: replicas across log dirs
PLACEMENTS = (PLACEMENT_BROKERS, PLACEMENT_LOG_DIRS)
PLACEMENT_NAMES = {PLACEMENT_BROKERS: "brokers", PLACEMENT_LOG_DIRS: "log_dirs"}
NO_SLOT = -1  # leader_slot: no leader known

_SLOT_FIELDS = ("state partition owner start_offset end_offset flushed_offset segment_generation "
                "high_watermark role leader leader_epoch isr_version isr isr_wanted epoch_start "
                + " ".join(REPLICA_FIELDS) + " placement fetch_epoch leader_slot name")


class PartitionSlot(namedtuple("PartitionSlot", _SLOT_FIELDS)):
    """One partition slot as read (``PARTITION_LAYOUT``), with the replica
    lists its fields encode."""

    __slots__ = ()

    @property
    def replicated(self) -> bool:
        return self.role != ROLE_PLAIN

    @property
    def dirs_placed(self) -> bool:
        """A replica across this broker's log dirs: its ids are log dir ids."""
        return self.placement == PLACEMENT_LOG_DIRS

    @property
    def replicas(self) -> tuple[int, ...]:
        """The replica ids (broker ids, or log dir ids for a dir-placed slot),
        preferred leader first; () for a PLAIN slot."""
        if self.role == ROLE_PLAIN:
            return ()
        return tuple(r for r in self[15:15 + MAX_REPLICAS] if r != NO_REPLICA)

    @property
    def isr_ids(self) -> tuple[int, ...]:
        """The committed ISR's broker ids, in replica order."""
        return isr_members(self.replicas, self.isr)

    @property
    def isr_wanted_ids(self) -> tuple[int, ...]:
        return isr_members(self.replicas, self.isr_wanted)

    @property
    def readable_end(self) -> int:
        """Where consumers stop: the high watermark of a replicated partition,
        the log end of a plain one."""
        if self.role == ROLE_PLAIN:
            return self.end_offset
        return min(self.high_watermark, self.end_offset)


assert PartitionSlot._fields[15:15 + MAX_REPLICAS] == REPLICA_FIELDS


def under_replicated(slots: Sequence[PartitionSlot]) -> bool:
    """Whether a replicated partition, given the slots this broker holds of
    it (as read; a partition with replicas across log dirs has one per
    replica), is short of a replica: none of them is an ONLINE leader, or the
    committed ISR of its leader (the highest leader epoch among them) lacks
    one of its replicas. The one definition ``/metrics`` and ``hostbroker
    top`` use for replicas across log dirs (a cluster broker without the
    leader leaves the figure to the leader's broker)."""
    leader = None
    for s in slots:
        if s.role == ROLE_LEADER and s.state == ONLINE and (
                leader is None or s.leader_epoch > leader.leader_epoch):
            leader = s
    return leader is None or len(leader.isr_ids) < len(leader.replicas)


def replica_fields(replicas: Sequence[int]) -> dict[str, int]:
    """``r0 .. r7`` for a replica list (the rest NO_REPLICA); ValueError for more
    than MAX_REPLICAS, a repeated id or one outside 0..2**31-1."""
    replicas = list(replicas)
    if len(replicas) > MAX_REPLICAS:
        raise ValueError(f"{len(replicas)} replicas: at most {MAX_REPLICAS} are supported")
    if len(set(replicas)) != len(replicas):
        raise ValueError(f"replicas {replicas} name a broker twice")
    if not all(type(r) is int and 0 <= r < 2**31 for r in replicas):
        raise ValueError(f"replicas {replicas}: broker ids are integers 0..2**31-1")
    padded = replicas + [NO_REPLICA] * (MAX_REPLICAS - len(replicas))
    return dict(zip(REPLICA_FIELDS, padded))


def isr_bits(replicas: Sequence[int], members) -> int:
    """The bitmap of ``members`` over ``replicas`` (ids not among them are dropped)."""
    members = set(members)
    return sum(1 << i for i, r in enumerate(replicas) if r in members)


def isr_members(replicas: Sequence[int], bits: int) -> tuple[int, ...]:
    """The broker ids of bitmap ``bits`` over ``replicas``, in replica order."""
    return tuple(r for i, r in enumerate(replicas) if bits >> i & 1)


PARTITION_LAYOUT = SlotLayout(
    b"PART",
    PartitionSlot,
    [
        ("state", "I"),
        ("partition", "i"),
        ("owner", "I"),
        ("name_len", "I"),
        ("start_offset", "q"),
        ("end_offset", "q"),
        ("flushed_offset", "q"),
        ("segment_generation", "Q"),
        ("high_watermark", "q"),
        ("role", "I"),
        ("leader", "i"),
        ("leader_epoch", "i"),
        ("isr_version", "i"),
        ("isr", "I"),
        ("isr_wanted", "I"),
        ("epoch_start", "q"),
        *((name, "i") for name in REPLICA_FIELDS),
        ("name", "256s"),
        ("placement", "I"),
        ("fetch_epoch", "i"),
        ("leader_slot", "i"),
    ],
    slot_size=448,
)

# every replication field of a slot at its FREE value (PartitionTable.free)
_NO_REPLICATION = {"high_watermark": 0, "role": ROLE_PLAIN, "leader": -1, "leader_epoch": 0,
                   "isr_version": 0, "isr": 0, "isr_wanted": 0, "epoch_start": 0,
                   **dict.fromkeys(REPLICA_FIELDS, NO_REPLICA),
                   "placement": PLACEMENT_BROKERS, "fetch_epoch": -1, "leader_slot": NO_SLOT}


# start_offset, end_offset, flushed_offset and segment_generation: side by side
_OFFSETS = struct.Struct("<qqqQ")
_OFFSETS_AT = PARTITION_LAYOUT._writers["start_offset"][0]
assert [PARTITION_LAYOUT._writers[n][0] - _OFFSETS_AT for n in (
    "start_offset", "end_offset", "flushed_offset", "segment_generation")] == [0, 8, 16, 24]

# the slot's claims counter (module docstring): past the layout's fields, u64-aligned
_CLAIMS_AT = 400
assert PARTITION_LAYOUT.struct.size <= _CLAIMS_AT and _CLAIMS_AT + 8 <= PARTITION_LAYOUT.slot_size

_OFFLINE_DIRS_AT = 32
MAX_FLAGGED_LOG_DIRS = 256  # the 32 user bytes of the header


class PartitionTable(SlotTable):
    """One slot per partition: its log's offsets, segment generation and state.

    Each ONLINE slot is written only by the writer process that owns its log
    dir (``owner``); the admin claims FREE slots (state CREATING) and frees
    them under the :class:`~hostbroker.shm.adminlock.AdminLock`, bumping
    :attr:`generation`. Handlers read slots on every produce and fetch request.
    """

    LAYOUT = PARTITION_LAYOUT
    VERSION = 3  # 2: the high water; 3: the log dir fields (448-byte slots)

    def __init__(self, region: SharedRegion, opened: bool, layout: SlotLayout):
        super().__init__(region, opened, layout)
        self._i64 = self._view(0, TABLE_HEADER_SIZE + self.slot_count * self.slot_size, "q")

    def write_offsets(self, i: int, start_offset: int, end_offset: int, flushed_offset: int,
                      segment_generation: int) -> None:
        """What :meth:`write` of these four fields does, in one store: a writer
        publishes them after every round of appends."""
        self._write(i, lambda offset: _OFFSETS.pack_into(
            self._buf, offset + _OFFSETS_AT, start_offset, end_offset, flushed_offset,
            segment_generation))

    def figures(self) -> list[tuple[int, int, int, int]]:
        """``(state, start_offset, end_offset, owner)`` of every slot below the
        high water, in slot order, each one write's (the seqlock's promise).

        Read a field at a time over all slots, from strided views of the
        table: the seqs, then the fields, then the seqs again. A slot whose
        seq was odd or moved in between is read again alone (:meth:`read`,
        which may raise :class:`TornSlotError`). Under x86-64 TSO each slot's
        field loads fall between its two seq loads, as in :meth:`read`.
        A tenth of the cost of :meth:`read` a slot at a time (0.2 against
        2.1 µs a slot, 9,001 slots, on the development VM): METADATA for
        every topic reads them all.
        """
        n = self.high_water
        step = self.slot_size >> 3  # a slot in u64 / i64 words
        first = TABLE_HEADER_SIZE >> 3
        stop = first + n * step
        u64, i64, u32 = self._u64, self._i64, self._u32
        seqs = u64[first:stop:step].tolist()
        # the seqs' low bytes again, to find the odd ones at C speed: a slot
        # odd in ``seqs`` is odd here too, or its seq moves by the last pass
        low = self._buf[TABLE_HEADER_SIZE:stop << 3:self.slot_size].tobytes()
        odd = b"\x01" in low.translate(_ODD)
        states = u32[2 * first + 2:2 * stop:2 * step].tolist()  # state at byte 8
        owners = u32[2 * first + 4:2 * stop:2 * step].tolist()  # owner at byte 16
        starts = i64[first + 3:stop:step].tolist()  # start_offset at byte 24
        ends = i64[first + 4:stop:step].tolist()  # end_offset at byte 32
        again = u64[first:stop:step].tolist()
        out = list(zip(states, starts, ends, owners))
        if odd or seqs != again:
            for i, (seq, seq2) in enumerate(zip(seqs, again)):
                if seq != seq2 or seq & 1:
                    s = self.read(i)
                    out[i] = (s.state, s.start_offset, s.end_offset, s.owner)
        return out

    def claim_replica(self, i: int, replicas: Sequence[int], leader: int = -1,
                      leader_epoch: int = 0, role: int = ROLE_STOPPED,
                      placement: int = PLACEMENT_BROKERS, **fields) -> None:
        """Write slot ``i`` as a replica of a replicated topic: the admin's
        claim (hold the AdminLock), with the slot's other ``fields`` (state,
        name, partition, owner, offsets) as :meth:`write` takes them. ``role``
        is STOPPED (no leadership known yet) or FOLLOWER; the owning writer
        makes it a leader. ``placement`` says whether ``replicas`` and
        ``leader`` are broker ids or log dir ids (PLACEMENT_LOG_DIRS). A
        dir-placed replica is claimed with no leader slot and no fetch epoch.
        ValueError for a bad replica list, role or placement."""
        if role not in (ROLE_STOPPED, ROLE_FOLLOWER):
            raise ValueError(f"a replica is claimed stopped or follower, not {role!r}")
        if placement not in PLACEMENTS:
            raise ValueError(f"no placement {placement!r}")
        values = dict(_NO_REPLICATION)
        values.update(replica_fields(replicas), role=role, leader=leader,
                      leader_epoch=leader_epoch, placement=placement)
        values.update(fields)
        self.write(i, **values)

    def free(self, i: int) -> None:
        """Mark slot ``i`` FREE, its replication fields reset (a partition
        created into it later starts PLAIN), and count the release in its
        ``claims``. Its writer, or the admin, calls it (one at a time, as
        every write of the slot)."""
        self.write(i, state=FREE, **_NO_REPLICATION)
        self._u64[(self._offset(i) + _CLAIMS_AT) >> 3] += 1

    def claims(self, i: int) -> int:
        """How many times slot ``i`` was freed: one aligned load."""
        return self._u64[(self._offset(i) + _CLAIMS_AT) >> 3]

    def claims_view(self) -> memoryview:
        """Every slot's ``claims``, indexed by slot: a strided view of the
        table (no copy), for the stats recorders' hot paths."""
        first = (TABLE_HEADER_SIZE + _CLAIMS_AT) >> 3
        step = self.slot_size >> 3
        view = self._u64[first:first + self.slot_count * step:step]
        self._views.append(view)  # released on close, as the table's own views
        return view

    def owner(self, i: int) -> int:
        """Slot ``i``'s owner alone: one aligned load (set once, when the slot is claimed)."""
        return self._u32[(self._offset(i) + 16) >> 2]

    def mid_write(self, i: int) -> int | None:
        """Slot ``i``'s sequence if a write is under way (odd), else None."""
        seq = self._u64[self._offset(i) >> 3]
        return seq if seq & 1 else None

    def set_log_dir_offline(self, index: int, offline: bool = True) -> None:
        """Flag log dir ``index`` offline (or usable again); hold the AdminLock.

        Log dirs past ``MAX_FLAGGED_LOG_DIRS`` are not flagged.
        """
        if not 0 <= index < MAX_FLAGGED_LOG_DIRS:
            return
        at = _OFFLINE_DIRS_AT + index // 8
        bit = 1 << (index % 8)
        self._buf[at] = self._buf[at] | bit if offline else self._buf[at] & ~bit

    def offline_log_dirs(self) -> set[int]:
        """Indexes of the log dirs flagged offline."""
        flags = bytes(self._buf[_OFFLINE_DIRS_AT:_OFFLINE_DIRS_AT + MAX_FLAGGED_LOG_DIRS // 8])
        return {i for i in range(MAX_FLAGGED_LOG_DIRS) if flags[i // 8] >> (i % 8) & 1}


# -- the ISR commits ---------------------------------------------------------

IsrCommit = namedtuple("IsrCommit", "state commit_version commit_isr leader_epoch")

ISR_COMMITS = SlotLayout(
    b"ISRC",
    IsrCommit,
    [("state", "I"), ("commit_version", "i"), ("commit_isr", "I"), ("leader_epoch", "i")],
    slot_size=64,
)
COMMITTED = 1  # an IsrCommit's state once the registrar wrote it


class IsrCommitTable(SlotTable):
    """One slot per partition table slot (same index): the ISR the
    registrar last wrote to ZooKeeper for a partition this broker leads.

    Written by the registrar (:meth:`commit`, after the state node's
    version-checked write) and by the handler that claims the partition slot
    for a replica (:meth:`clear`), each under the
    :class:`~hostbroker.shm.adminlock.AdminLock`, so the seqlock has one
    writer at a time; the registrar commits only while the partition slot
    still holds the partition, leader epoch and leadership it wrote for.
    So a commit left by a partition that had the slot before is gone when
    another takes it (a writer replaced later adopts any commit it finds: its
    predecessor may not have). Read by the partition's writer, which adopts
    a commit of its own leader epoch written since its leadership began
    (:meth:`seq` grows with every write).
    """

    LAYOUT = ISR_COMMITS

    def seq(self, slot: int) -> int:
        """Slot ``slot``'s seqlock sequence: it grows with every commit (odd
        while one is being written). One aligned load."""
        return self._u64[self._offset(slot) >> 3]

    def commit(self, slot: int, version: int, isr_bits: int, leader_epoch: int) -> None:
        """Record that ZooKeeper now holds ISR ``isr_bits`` for slot ``slot``'s
        partition at state node version ``version``, in ``leader_epoch``."""
        self.write(slot, state=COMMITTED, commit_version=version, commit_isr=isr_bits,
                   leader_epoch=leader_epoch)

    def clear(self, slot: int) -> None:
        """Forget slot ``slot``'s commit: its partition slot is claimed anew."""
        self.write(slot, state=FREE, commit_version=0, commit_isr=0, leader_epoch=0)
