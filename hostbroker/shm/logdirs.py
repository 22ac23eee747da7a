"""The log dir table: each configured log dir's id, state and counts.

Owns: one shared :class:`~hostbroker.shm.table.SlotTable` of
``LOGDIR_LAYOUT`` (layout id ``b"LDIR"``), one 64-byte slot per configured
log dir, slot index = the index of the dir's writer (its place in
``log.dirs``). The supervisor creates it (``plan.logdirs_name``) and fills
each ``dir_id`` before any worker starts (:meth:`LogDirTable.fill`); from
then on ``hb-logdirs`` is its only writer. Handlers (METADATA v2),
``hostbroker top``, the writers (their own replica id, ``book.me``) and
tests read it.

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
"""

from __future__ import annotations

import enum
from collections import namedtuple
from collections.abc import Sequence

from hostbroker.shm.region import SharedRegion
from hostbroker.shm.table import FREE, SlotLayout, SlotTable


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

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, dir_ids: Sequence[int],
               layout: SlotLayout | None = None) -> "LogDirTable":
        """The table for ``dir_ids`` (``plan.dir_ids``: one per configured log
        dir, -1 for a dir without an id), filled (:meth:`fill`)."""
        _check_ids(dir_ids)  # before anything is created
        table = super().create(region_or_name, max(1, len(dir_ids)), layout)
        table.fill(dir_ids)
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
        handlers' views read ids on every topic change; see
        :meth:`repair_torn`)."""
        if not 0 <= index < self.slot_count or self.state(index) == FREE:
            return NO_DIR_ID
        raw = self._u32[(self._offset(index) + _DIR_ID_AT) >> 2]
        return raw - (1 << 32) if raw >= 1 << 31 else raw

    def repair_torn(self) -> list[int]:
        """Finish every slot a dead ``hb-logdirs`` left mid-write (seq odd), as
        it is: each field is stored whole, and the next pass writes the states
        and counts again. The indices repaired. hb-logdirs calls it first when
        it starts; until then, a reader of such a slot waits
        ``READ_STUCK_SECONDS`` and gets TornSlotError (:meth:`dir_id` excepted)."""
        repaired = []
        for index in range(self.slot_count):
            if self._u64[self._offset(index) >> 3] & 1 and self.repair(index):
                repaired.append(index)
        return repaired

    def index_of(self, dir_id: int) -> int | None:
        """The writer index of the dir holding ``dir_id``, None if none does."""
        if dir_id == NO_DIR_ID:
            return None
        for index, s in self.scan():
            if s.dir_id == dir_id:
                return index
        return None

    def ids(self) -> dict[int, int]:
        """``{writer index: dir id}`` of every dir whose id is known."""
        return {index: s.dir_id for index, s in self.scan() if s.dir_id != NO_DIR_ID}

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
