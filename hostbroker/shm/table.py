"""Tables of fixed-size slots in shared memory, read lock-free (seqlock).

Owns: the slot table format and its seqlock protocol (:class:`SlotLayout`,
:class:`SlotTable`). Changes that add or free slots are made under
:class:`~hostbroker.shm.adminlock.AdminLock`.

Table layout (little-endian, x86-64 only)::

    offset  size  field
    0       4     magic       b"HBST"
    4       4     version     1
    8       4     layout_id   which slot layout, 4 ASCII bytes (b"PART", b"PROC")
    12      4     slot_size   bytes, a multiple of 64 (slots never share a cache line)
    16      4     slot_count
    20      4     high water  one more than the highest slot ever taken: every
                              slot from it on is FREE, and scans stop there
    24      8     generation  bumped by whoever adds or frees slots, so readers
                              can tell their cached view of the table is stale
    32      32    user words  owned by the layout's user (see procs.py)
    64            slot 0, slot 1, ... each slot_size bytes

Every slot starts with ``seq u64`` then ``state u32`` (0 = FREE in every
layout), then the layout's fields, each naturally aligned. Readers go
through the seqlock, except that :meth:`SlotTable.state` (and so
``find_free`` and ``scan``) loads ``state`` alone: one aligned load of a
value that fits its low byte, so never torn. Whoever takes a slot above the
high water raises it first, then writes the slot, so a scan that read the
high water never misses a taken slot; taking a slot is one process's at a
time (the admin lock, or the supervisor for the process board).

Seqlock: a slot has one writer at a time (the partition's owning writer;
the admin under :class:`~hostbroker.shm.adminlock.AdminLock` while creating or freeing it). It stores
``seq + 1`` (odd: write in progress), the fields, then ``seq + 2``. A reader
loads seq, the fields, and seq again, and retries while seq is odd or
changed. Under x86-64 TSO the writer's stores and the reader's loads each
keep program order, so an even, unchanged seq means the fields are one
write's. A writer that dies mid-write leaves seq odd: readers raise
:class:`TornSlotError` once seq has stayed at that odd value for
``READ_SPINS`` tries and ``READ_STUCK_SECONDS`` (a merely preempted writer
comes back sooner), and the restarted writer calls :meth:`SlotTable.repair`
with the slot's true contents. A writer that never pauses between writes
could starve readers; they give up after ``READ_GIVE_UP_SECONDS``.

A read is about 1.1 µs on the development VM (``test_read_is_fast``).

The partition table and its ISR commit table, the broker's layouts of
these slots, are :mod:`hostbroker.shm.partitions`; the process board is
:mod:`hostbroker.shm.procs`.
"""

from __future__ import annotations

import operator
import os
import struct
import time
from collections.abc import Sequence
from itertools import compress

from hostbroker.shm.region import LayoutError, SharedRegion, Structure, tag_magic

TABLE_HEADER_SIZE = 64
_STATE_AT = 8  # a slot's state: u32 after its seq
_TABLE_HEADER = struct.Struct("<IIIIII")  # magic .. high water
_HIGH_WATER = 20 // 4  # index into the header viewed as u32
_GENERATION = 24 // 8  # index into the header viewed as u64
FREE = 0
# A reader gives up on a slot whose seq stayed at one odd value for this many
# tries and this long (its writer died mid-write), or that it could not read
# consistently for READ_GIVE_UP_SECONDS (a writer that never pauses). A live
# writer preempted mid-write can wait tens of milliseconds for a core when
# every core is busy (20 ms was seen to be too short on 2 loaded cores); only
# a writer's death, which the supervisor repairs, costs a reader this long.
READ_SPINS = 10_000
READ_STUCK_SECONDS = 0.5
READ_GIVE_UP_SECONDS = 1.0


class TornSlotError(RuntimeError):
    """A slot could not be read consistently: its writer died mid-write (or never pauses)."""


class SlotLayout:
    """The fields of one kind of slot, after the ``seq`` word.

    ``fields`` are ``(name, struct code)`` in order; the first must be
    ``("state", "I")``. Names starting with ``_`` are padding, left out of
    records. At most one field is not a scalar, and it comes last among the
    record's fields: either text (``"<n>s"`` with a ``<name>_len`` u32 field
    before it, read as str) or an array (``"<n>Q"`` etc., read as a tuple).
    ``record`` is the namedtuple type :meth:`SlotTable.read` returns.
    """

    def __init__(self, layout_id: bytes, record: type, fields: Sequence[tuple[str, str]], slot_size: int):
        if tuple(fields[:1]) != (("state", "I"),):
            raise ValueError("a slot layout starts with ('state', 'I')")
        self.layout_id = tag_magic(layout_id)
        self.record = record
        self.slot_size = slot_size
        self._writers: dict[str, tuple[int, struct.Struct]] = {}
        self._texts: dict[str, int] = {}
        format_ = "<Q"
        positions: dict[str, int] = {}  # field name -> index in the unpacked values
        arrays: dict[str, int] = {}
        count = 1
        for name, code in fields:
            offset = struct.calcsize(format_)
            field = struct.Struct("<" + code)
            item = struct.calcsize("<" + code.lstrip("0123456789"))
            if offset % min(8, item or 1):
                raise ValueError(f"field {name} at offset {offset} is not aligned")
            format_ += code
            width = len(field.unpack(bytes(field.size)))
            count += width
            if name.startswith("_"):
                continue
            positions[name] = count - width
            self._writers[name] = (offset, field)
            if code.endswith("s"):
                self._texts[name] = field.size
            elif width > 1:
                arrays[name] = width
        self.struct = struct.Struct(format_)
        if self.struct.size > slot_size or slot_size % 64:
            raise ValueError(f"{self.struct.size} bytes of fields do not fit slot_size {slot_size}")
        self.decode = self._decoder(record, positions, arrays)

    def _decoder(self, record: type, positions: dict[str, int], arrays: dict[str, int]):
        names = list(record._fields)
        hidden = {f"{text}_len" for text in self._texts}
        if sorted(names) != sorted(set(positions) - hidden):
            raise ValueError(f"record fields {names} do not match the layout")
        tail = names[-1] if self._texts.keys() | arrays.keys() else None
        if tail is not None and {tail} != self._texts.keys() | arrays.keys():
            raise ValueError("a slot layout has at most one text or array field, last in the record")
        scalars = [positions[n] for n in names if n != tail]
        pick = operator.itemgetter(*scalars) if len(scalars) > 1 else lambda v: (v[scalars[0]],)
        new = tuple.__new__
        if tail is None:
            return lambda v: new(record, pick(v))
        at = positions[tail]
        if tail in arrays:
            end = at + arrays[tail]
            return lambda v: new(record, (*pick(v), v[at:end]))
        length_at = positions[f"{tail}_len"]
        return lambda v: new(record, (*pick(v), v[at][: v[length_at]].decode()))

    def pack_field(self, buf: memoryview, slot_offset: int, name: str, value) -> None:
        """Store one field of the slot at ``slot_offset`` (no seqlock here)."""
        try:
            offset, field = self._writers[name]
        except KeyError:
            raise ValueError(f"no slot field {name!r}") from None
        if name in self._texts:
            value = value.encode()
            if len(value) > self._texts[name]:
                raise ValueError(f"{name} longer than {self._texts[name]} bytes")
            self.pack_field(buf, slot_offset, f"{name}_len", len(value))
        if isinstance(value, (tuple, list)):
            field.pack_into(buf, slot_offset + offset, *value)
        else:
            field.pack_into(buf, slot_offset + offset, value)


class SlotTable(Structure):
    """A table of ``slot_count`` slots of one :class:`SlotLayout`.

    Subclasses fix the layout in ``LAYOUT``. One handle per process; not
    thread safe.
    """

    MAGIC = tag_magic(b"HBST")
    VERSION = 2  # 2: the high water
    LAYOUT: SlotLayout | None = None

    def __init__(self, region: SharedRegion, opened: bool, layout: SlotLayout):
        super().__init__(region, opened)
        self._check_stamp()
        _, _, layout_id, slot_size, slot_count, _ = _TABLE_HEADER.unpack_from(region.buf, 0)
        if layout_id != layout.layout_id or slot_size != layout.slot_size:
            raise LayoutError(f"{region.name}: slot layout {layout_id:#x}/{slot_size} is not the one expected")
        if region.size < TABLE_HEADER_SIZE + slot_count * slot_size:
            raise LayoutError(f"{region.name}: region too small for {slot_count} slots")
        self.layout = layout
        self.slot_count = slot_count
        self.slot_size = slot_size
        self._buf = region.buf
        self._u64 = self._view(0, TABLE_HEADER_SIZE + slot_count * slot_size, "Q")
        self._u32 = self._view(0, TABLE_HEADER_SIZE + slot_count * slot_size, "I")
        self._unpack = layout.struct.unpack_from
        self._decode = layout.decode

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, slot_count: int, layout: SlotLayout | None = None):
        """Lay out a table of free slots (owner side), in a region or a new named one."""
        layout = layout or cls.LAYOUT
        if slot_count <= 0:
            raise ValueError("a table has at least one slot")
        size = cls.region_size(slot_count, layout)
        region, opened = cls._open(region_or_name, size)
        region.buf[:size] = bytes(size)
        _TABLE_HEADER.pack_into(region.buf, 0, cls.MAGIC, cls.VERSION, layout.layout_id, layout.slot_size, slot_count, 0)
        return cls(region, opened, layout)

    @classmethod
    def region_size(cls, slot_count: int, layout: SlotLayout | None = None) -> int:
        """Bytes of region a table of ``slot_count`` slots needs."""
        return TABLE_HEADER_SIZE + slot_count * (layout or cls.LAYOUT).slot_size

    @classmethod
    def attach(cls, region_or_name: SharedRegion | str, layout: SlotLayout | None = None, readonly: bool = False):
        """Attach to an existing table. Raises LayoutError if it is not one of ``layout``.

        A read-only attach supports :meth:`read`, :meth:`scan` and
        :attr:`generation` only.
        """
        return cls._attach(region_or_name, readonly, layout=layout or cls.LAYOUT)

    def _offset(self, i: int) -> int:
        if not 0 <= i < self.slot_count:
            raise IndexError(f"slot {i} not in 0..{self.slot_count - 1}")
        return TABLE_HEADER_SIZE + i * self.slot_size

    def read(self, i: int):
        """A consistent copy of slot ``i`` (the layout's record).

        Raises TornSlotError if the slot stays mid-write (its writer died
        there) or never holds still (see the module docstring).
        """
        # The first try is inlined: this runs on every produce and fetch request.
        if not 0 <= i < self.slot_count:
            raise IndexError(f"slot {i} not in 0..{self.slot_count - 1}")
        offset = TABLE_HEADER_SIZE + i * self.slot_size
        u64 = self._u64
        seq = u64[offset >> 3]
        if not seq & 1:
            values = self._unpack(self._buf, offset)
            if u64[offset >> 3] == seq:
                return self._decode(values)
        return self._read_retrying(i, offset)

    def _read_retrying(self, i: int, offset: int):
        seq_at = offset >> 3
        u64 = self._u64
        started = time.monotonic()
        stuck_seq, stuck_spins, stuck_since = -1, 0, started
        spin = 0
        while True:
            seq = u64[seq_at]
            if not seq & 1:
                values = self._unpack(self._buf, offset)
                if u64[seq_at] == seq:
                    return self._decode(values)
            elif seq != stuck_seq:
                stuck_seq, stuck_spins, stuck_since = seq, 0, None
            else:
                stuck_spins += 1
            spin += 1
            if spin & 63:
                continue
            # A writer preempted mid-write needs this CPU, or just time.
            os.sched_yield()
            now = time.monotonic()
            if stuck_since is None:
                stuck_since = now
            if stuck_spins >= READ_SPINS and now - stuck_since >= READ_STUCK_SECONDS:
                raise TornSlotError(f"{self.name}: slot {i} stayed mid-write (seq {seq}); its writer died")
            if now - started >= READ_GIVE_UP_SECONDS:
                raise TornSlotError(f"{self.name}: slot {i} changed during every read for {READ_GIVE_UP_SECONDS} s")

    def write(self, i: int, **fields) -> None:
        """Change fields of slot ``i`` under the seqlock; only the slot's writer calls it.

        Raises TornSlotError if a previous writer died mid-write: the new one
        must :meth:`repair` the slot first.
        """
        def store(offset: int) -> None:
            for name, value in fields.items():
                self.layout.pack_field(self._buf, offset, name, value)

        self._write(i, store, taking=bool(fields.get("state")))

    def _write(self, i: int, store, taking: bool = False) -> None:
        """The seqlock's write of slot ``i``: ``store(offset of the slot)``
        between seq + 1 and seq + 2. ``taking`` (a state is set) raises the
        high water first when the slot is above it."""
        offset = self._offset(i)
        seq_at = offset >> 3
        seq = self._u64[seq_at]
        if seq & 1:
            raise TornSlotError(f"{self.name}: slot {i} was left mid-write; repair it")
        if taking and i >= self._u32[_HIGH_WATER]:
            self._u32[_HIGH_WATER] = i + 1  # before the slot shows taken
        self._u64[seq_at] = seq + 1
        try:
            store(offset)
        finally:
            self._u64[seq_at] = seq + 2

    def repair(self, i: int, **fields) -> bool:
        """Finish slot ``i`` for a writer that died mid-write: store ``fields``, make seq even.

        Pass every field the dead writer may have been changing, with its
        true value. Returns True if the slot needed it.
        """
        offset = self._offset(i)
        seq_at = offset >> 3
        seq = self._u64[seq_at]
        if not seq & 1:
            self.write(i, **fields)
            return False
        if fields.get("state") and i >= self._u32[_HIGH_WATER]:
            self._u32[_HIGH_WATER] = i + 1
        for name, value in fields.items():
            self.layout.pack_field(self._buf, offset, name, value)
        self._u64[seq_at] = seq + 1
        return True

    def state(self, i: int) -> int:
        """Slot ``i``'s state alone: one aligned load, no seqlock needed."""
        return self._u32[(self._offset(i) + _STATE_AT) >> 2]

    @property
    def high_water(self) -> int:
        """One more than the highest slot ever taken: every slot from it on is FREE."""
        return min(self._u32[_HIGH_WATER], self.slot_count)

    def _states(self) -> memoryview:
        """The states of the slots below the high water, in slot order: a
        strided view of the table (no copy)."""
        first, step = (TABLE_HEADER_SIZE + _STATE_AT) >> 2, self.slot_size >> 2
        return self._u32[first:first + self.high_water * step:step]

    def find_free(self) -> int | None:
        """The first FREE slot, or None. Claiming it races: hold the AdminLock."""
        states = self._states()
        for i, state in enumerate(states):
            if state == FREE:
                return i
        return len(states) if len(states) < self.slot_count else None

    def scan(self) -> list[tuple[int, tuple]]:
        """``(index, record)`` of every slot that is not FREE.

        Only the slots below the high water are looked at, and the ones in
        use are picked out of their states, copied out of the strided view
        as one list, by ``itertools.compress`` (FREE is 0): about 1.6 ms for
        all 65,536 slots of the default ``max.partitions`` (2.3 ms on Python
        3.13, whose iteration of the strided view itself takes 7 ms),
        against ~14 ms for a loop of :meth:`state`, and next to nothing for
        the few hundred slots a broker has usually taken. Every worker scans on each topic created
        or deleted, and handlers while holding the admin lock, so this
        bounds what a topic's creation costs the broker.
        """
        states = self._states().tolist()
        return [(i, self.read(i)) for i in compress(range(len(states)), states)]

    @property
    def generation(self) -> int:
        return self._u64[_GENERATION]

    def bump_generation(self) -> int:
        """Tell readers that slots were added or freed; returns the new generation.

        Only one process may bump at a time (the AdminLock holder).
        """
        self._u64[_GENERATION] += 1
        return self._u64[_GENERATION]
