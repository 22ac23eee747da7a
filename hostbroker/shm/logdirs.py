"""The log dir table: each configured log dir's id, state and counts.

Owns: one shared :class:`~hostbroker.shm.table.SlotTable` of
``LOGDIR_LAYOUT`` (layout id ``b"LDIR"``), one 64-byte slot per configured
log dir, slot index = the index of the dir's writer (its place in
``log.dirs``). The supervisor creates it (``plan.logdirs_name``) and fills
each ``dir_id`` before any worker starts (:meth:`LogDirTable.fill`); from
then on ``hb-logdirs`` is its only writer (the one process that attaches it
writable: its *owner*). Handlers (METADATA v2), ``hostbroker top``, the
writers (their own replica id, ``book.me``) and tests read it.

Log dir slot (64 bytes)::

    offset  size  field
    0       8     seq
    8       4     state              LD_ONLINE 1, LD_OFFLINE 2, LD_REOPENING 3
    12      4     dir_id             i32, the id in ``<log dir>/log-dir-id``
                                     (-1: none; see below)
    16      4     replicas           u32, replicas on this dir
    20      4     leaders            u32, of them leaders
    24      4     under_replicated   u32, partitions this dir leads whose ISR is short
    28      4     offline_replicas   u32, replicas on this dir that are offline

A dir's id is read here, never from the plan: a new disk can get its id
while the broker runs (``hostbroker logdirs online``). A dir without an id
(-1) holds no replicas across log dirs: every dir of a one-dir or cluster
broker (no ``hb-logdirs``, no id file), or one whose id file could not be
read or written. Its slot says ONLINE and nobody changes it; what it is
comes from its writer. The partition table's offline bitmap stays the
writers' own flag of a failed dir, and :func:`shown_state` joins the two:
a dir is shown offline while its writer flags it, whatever this table says,
and otherwise as this table's ``state`` (what ``hb-logdirs`` made of it).

A slot left mid-write (seq odd: its writer killed inside a write) costs
only itself. :meth:`LogDirTable.dir_id`, :meth:`~LogDirTable.ids` and
:meth:`~LogDirTable.index_of` load the ids without the seqlock (each field
is stored whole), so they never wait on it. A reader's :meth:`~LogDirTable.slot`
and :meth:`~LogDirTable.scan` wait once, ``READ_STUCK_SECONDS``, on a slot
stuck at one odd seq, then give it as unknown (None; left out of a scan)
at once for as long as it stays at that seq. The owner's handle repairs
any such slot as soon as it reads or writes the table: being its only
writer, a slot mid-write when it looks is a dead writer's (the one
``hb-logdirs`` replaced); the supervisor repairs them too when it replaces
a dead ``hb-logdirs`` (:meth:`LogDirTable.repair_torn`).
"""

from __future__ import annotations

import enum
from collections import namedtuple
from collections.abc import Sequence

from hostbroker.shm.region import SharedRegion
from hostbroker.shm.table import FREE, SlotLayout, SlotTable, TornSlotError


class LogDirState(enum.IntEnum):
    FREE = 0  # no log dir in this slot (the table has one slot per configured dir)
    ONLINE = 1
    OFFLINE = 2
    REOPENING = 3


LD_ONLINE = LogDirState.ONLINE
LD_OFFLINE = LogDirState.OFFLINE
LD_REOPENING = LogDirState.REOPENING
LD_STATE_NAMES = {FREE: "free", LD_ONLINE: "online", LD_OFFLINE: "offline",
                  LD_REOPENING: "reopening"}
NO_DIR_ID = -1
DIR_ID_MAX = 2**31 - 1
_COUNTS = ("replicas", "leaders", "under_replicated", "offline_replicas")

LogDirSlot = namedtuple("LogDirSlot", "state dir_id " + " ".join(_COUNTS))

LOGDIR_LAYOUT = SlotLayout(
    b"LDIR",
    LogDirSlot,
    [
        ("state", "I"),
        ("dir_id", "i"),
        *((name, "I") for name in _COUNTS),
    ],
    slot_size=64,
)
_DIR_ID_AT = LOGDIR_LAYOUT._writers["dir_id"][0]  # its offset in a slot


def _check_id(dir_id: int) -> int:
    if type(dir_id) is not int or not (dir_id == NO_DIR_ID or 1 <= dir_id <= DIR_ID_MAX):
        raise ValueError(f"log dir id {dir_id!r} not in 1..{DIR_ID_MAX} (or -1: none)")
    return dir_id


def _check_ids(dir_ids: Sequence[int]) -> list[int]:
    ids = [_check_id(d) for d in dir_ids]
    known = [d for d in ids if d != NO_DIR_ID]
    if len(set(known)) != len(known):
        raise ValueError(f"log dir ids {ids} name a dir twice")
    return ids


def shown_state(state: int, flagged_offline: bool) -> int:
    """A configured dir's state as the tools and METADATA v2 show it: its
    slot's ``state``, except OFFLINE while its writer flags the dir failed
    (``PartitionTable.offline_log_dirs``) and the slot still says ONLINE
    (``hb-logdirs`` has not seen it yet, or the dir has no id and no one
    keeps its slot)."""
    if flagged_offline and state == LD_ONLINE:
        return LD_OFFLINE
    return state


class LogDirTable(SlotTable):
    """One slot per configured log dir (index = writer index)."""

    LAYOUT = LOGDIR_LAYOUT
    owner = False  # this handle is hb-logdirs' (attached writable): it repairs torn slots

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._torn: dict[int, int] = {}  # slot -> the odd seq it was found stuck at
        self.repaired: list[int] = []  # slots this handle repaired (the owner's)

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, dir_ids: Sequence[int],
               layout: SlotLayout | None = None) -> "LogDirTable":
        """The table for ``dir_ids`` (``plan.dir_ids``: one per configured log
        dir, -1 for a dir without an id), filled (:meth:`fill`)."""
        _check_ids(dir_ids)  # before anything is created
        table = super().create(region_or_name, max(1, len(dir_ids)), layout)
        table.fill(dir_ids)
        return table

    @classmethod
    def attach(cls, region_or_name: SharedRegion | str, layout: SlotLayout | None = None,
               readonly: bool = False) -> "LogDirTable":
        """A handle on the table; a writable one is the owner's (hb-logdirs'),
        which repairs any slot it finds mid-write (see the module docstring)."""
        table = super().attach(region_or_name, layout, readonly)
        table.owner = not readonly
        return table

    def fill(self, dir_ids: Sequence[int]) -> None:
        """Write every dir's id, each dir ONLINE (one without an id too: its
        writer's flag says when it fails, :func:`shown_state`). The
        supervisor's, before the workers start. ValueError for a bad or
        repeated id, or more dirs than slots."""
        ids = _check_ids(dir_ids)
        if len(ids) > self.slot_count:
            raise ValueError(f"{len(ids)} log dirs do not fit {self.slot_count} slots")
        for index, dir_id in enumerate(ids):
            self.write(index, state=LD_ONLINE, dir_id=dir_id, replicas=0, leaders=0,
                       under_replicated=0, offline_replicas=0)

    def dir_id(self, index: int) -> int:
        """Log dir ``index``'s id (-1: none, or no such dir).

        Two aligned loads, the slot's state and its id, without the seqlock
        (as :meth:`~hostbroker.shm.table.SlotTable.state` loads a state): each
        field is stored whole, so neither is ever torn, and a slot that a dead
        ``hb-logdirs`` left mid-write neither stalls nor fails the reader (the
        handlers' views read ids on every topic change)."""
        if not 0 <= index < self.slot_count or self.state(index) == FREE:
            return NO_DIR_ID
        raw = self._u32[(self._offset(index) + _DIR_ID_AT) >> 2]
        return raw - (1 << 32) if raw >= 1 << 31 else raw

    def _seq(self, index: int) -> int:
        return self._u64[self._offset(index) >> 3]

    def repair_torn(self) -> list[int]:
        """Finish every slot a dead writer left mid-write (seq odd), as it is:
        each field is stored whole, and hb-logdirs' next pass writes the
        states and counts again. The indices repaired. Only for whoever may
        write the table and knows no live write is under way: hb-logdirs
        (when it starts, and its handle on every read and write), and the
        supervisor once hb-logdirs is dead."""
        repaired = []
        for index in range(self.slot_count):
            if self._seq(index) & 1 and self.repair(index):
                repaired.append(index)
        self.repaired.extend(repaired)
        return repaired

    def _mend(self, index: int | None = None) -> None:
        """The owner's handle: repair slot ``index`` (every slot when None)
        if it is mid-write. Nothing for a reader's handle."""
        if not self.owner:
            return
        if index is None:
            self.repair_torn()
        elif self._seq(index) & 1 and self.repair(index):
            self.repaired.append(index)

    def read(self, i: int):
        """Slot ``i`` through the seqlock, as :meth:`SlotTable.read`. The
        owner's handle first repairs it if it was left mid-write; a reader's
        raises TornSlotError (after ``READ_STUCK_SECONDS`` the first time,
        then at once while the slot stays at that seq). :meth:`slot` is the
        same without the exception."""
        self._mend(i)
        seq = self._seq(i)
        if seq & 1 and self._torn.get(i) == seq:
            raise TornSlotError(f"{self.name}: slot {i} stayed mid-write (seq {seq})")
        try:
            record = super().read(i)
        except TornSlotError:
            seq = self._seq(i)
            if seq & 1:
                self._torn[i] = seq
            raise
        self._torn.pop(i, None)
        return record

    def slot(self, i: int):
        """Slot ``i``'s record, or None while it is torn (left mid-write; the
        wait is bounded, see :meth:`read`)."""
        try:
            return self.read(i)
        except TornSlotError:
            return None

    def scan(self) -> list[tuple[int, tuple]]:
        """``(index, record)`` of every configured dir, those torn left out."""
        found = []
        for i in range(self.high_water):
            if self.state(i) != FREE:
                record = self.slot(i)
                if record is not None:
                    found.append((i, record))
        return found

    def index_of(self, dir_id: int) -> int | None:
        """The writer index of the dir holding ``dir_id``, None if none does
        (without the seqlock, as :meth:`dir_id`)."""
        if dir_id == NO_DIR_ID:
            return None
        for index, found in self.ids().items():
            if found == dir_id:
                return index
        return None

    def ids(self) -> dict[int, int]:
        """``{writer index: dir id}`` of every dir with an id (without the
        seqlock, as :meth:`dir_id`)."""
        self._mend()
        ids = {}
        for index in range(self.slot_count):
            dir_id = self.dir_id(index)
            if dir_id != NO_DIR_ID:
                ids[index] = dir_id
        return ids

    def write(self, i: int, **fields) -> None:
        """:meth:`SlotTable.write`; the owner's handle first repairs a slot
        left mid-write (a reader's handle cannot write)."""
        self._mend(i)
        super().write(i, **fields)

    def set_id(self, index: int, dir_id: int) -> None:
        """Give dir ``index`` its id (a new disk taken online); hb-logdirs only.
        ValueError if another dir holds it."""
        _check_id(dir_id)
        holder = self.index_of(dir_id)
        if holder is not None and holder != index:
            raise ValueError(f"log dir id {dir_id} is already dir {holder}'s")
        self.write(index, dir_id=dir_id)

    def set_state(self, index: int, state: int) -> None:
        """hb-logdirs only."""
        self.write(index, state=LogDirState(state))

    def set_counts(self, index: int, replicas: int, leaders: int, under_replicated: int,
                   offline_replicas: int) -> None:
        """hb-logdirs only, after each pass."""
        self.write(index, replicas=replicas, leaders=leaders,
                   under_replicated=under_replicated, offline_replicas=offline_replicas)
