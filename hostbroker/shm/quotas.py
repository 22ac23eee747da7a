"""What each principal with a quota did lately, counted by every processor:
the shared table quotas are enforced from (docs/security.md, "Quotas").

Owns: :class:`QuotaCounters`, one region for the whole broker (named by
``plan.quotas_name``, made by the supervisor before it forks), split in one
*part* per processor. A principal's clients may be spread over every
processor; each processor counts what its own connections did in its own
part (one writer per part, so an add is a plain load and store of an aligned
u64, as in :mod:`hostbroker.shm.stats`), and reads the principal's rows of
every part to know the principal's whole rate.

Layout (``b"QUOT"``)::

    offset  size  field
    0       4     magic       b"QUOT"
    4       4     version     1
    8       4     parts       one per processor
    12      4     rows        rows a part (``quota.max.principals``)
    16      4     windows     ``quota.window.num``
    20      4     window_ms   ``quota.window.size.seconds`` x 1000
    24      40    reserved
    64            part 0 row 0, part 0 row 1, ... each 1 + 4 x windows u64:
                  key; then per window: index + 1, produce bytes, fetch bytes, requests

A row's ``key`` is the principal's hash (:func:`principal_key`, never 0; 0:
the row was never used). A principal's row in a part is found by linear
probing from ``key % rows``; a row is never emptied again, only taken over
(its counters zeroed, then its key written) by its part's writer once none
of its windows is recent (nothing counted for a whole span), so a probe may
stop at the first row never used. The window of time ``t`` (monotonic
seconds) has index ``t // window size`` and lives in slot ``index %
windows``, which holds ``index + 1`` before its counters: a slot whose index
is older than the windows kept is stale and read as zero; the writer that
enters a new window in a slot zeroes it first.

A part that is full (``rows`` principals counted in the last span) counts a
new principal nowhere: its connections on that processor are not
throttled until a row comes free (said in the log once by the caller).
Readers see a row while it is written: a rate may mix moments (an answer's
worth at most), fine for enforcement, which is approximate in Kafka too.
"""

from __future__ import annotations

import hashlib
import struct

from hostbroker.shm.region import SharedRegion, Structure, tag_magic

HEADER_BYTES = 64
_HEADER = struct.Struct("<IIIIII")
PRODUCE, FETCH, REQUESTS = 0, 1, 2  # the counters of a window, after its index
_WINDOW_WORDS = 4


def principal_key(principal: str) -> int:
    """The 64-bit key of a principal's rows (never 0)."""
    return int.from_bytes(hashlib.blake2b(principal.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little") or 1


class QuotaCounters(Structure):
    """The shared table of quota counters (module docstring)."""

    MAGIC = tag_magic(b"QUOT")
    VERSION = 1

    def __init__(self, region: SharedRegion, opened: bool, part: int | None = None):
        super().__init__(region, opened)
        self._check_stamp()
        _, _, parts, rows, windows, window_ms = _HEADER.unpack_from(region.buf, 0)
        if (not parts or not rows or windows < 2 or not window_ms
                or region.size < self.region_size(parts, rows, windows)):
            raise ValueError(f"{region.name}: {parts} parts of {rows} rows do not fit "
                             f"{region.size} bytes")
        self.parts, self.rows, self.windows = parts, rows, windows
        self.window_s = window_ms / 1000
        self.row_words = 1 + _WINDOW_WORDS * windows
        self.words = self._view(HEADER_BYTES, self.region_size(parts, rows, windows), "Q")
        self.part = part  # the part this process writes (None: a reader only)
        self._own: dict[int, int] = {}  # key -> row of this process's part
        self._owner_of: dict[int, int] = {}  # row -> key, of the same
        self._found: list[dict[int, int]] = [{} for _ in range(parts)]  # key -> row, per part
        self._row_struct = struct.Struct(f"<{self.row_words}Q")

    @staticmethod
    def region_size(parts: int, rows: int, windows: int) -> int:
        return HEADER_BYTES + parts * rows * (1 + _WINDOW_WORDS * windows) * 8

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, parts: int, rows: int, windows: int,
               window_s: int) -> QuotaCounters:
        """A table for ``parts`` processors of ``rows`` principals each (the
        supervisor's). A new region is zero-filled: only the header is written."""
        if parts <= 0 or rows <= 0 or windows < 2 or window_s <= 0:
            raise ValueError("quota counters: a part, a row and two windows at least")
        size = cls.region_size(parts, rows, windows)
        region, opened = cls._open(region_or_name, size)
        try:
            _HEADER.pack_into(region.buf, 0, cls.MAGIC, cls.VERSION, parts, rows, windows,
                              window_s * 1000)
            return cls(region, opened)
        except BaseException:
            if opened:
                region.close()
                region.unlink()
            raise

    @classmethod
    def attach(cls, region_or_name: SharedRegion | str, part: int | None = None,
               readonly: bool = False) -> QuotaCounters:
        """A handle that writes ``part`` (a processor's index), or reads only."""
        return cls._attach(region_or_name, readonly, part=part)

    # -- writing (a processor, its own part) ------------------------------------
    def _base(self, part: int, row: int) -> int:
        return (part * self.rows + row) * self.row_words

    def _recent(self, base: int, now_index: int) -> bool:
        words = self.words
        oldest = now_index - self.windows + 1
        return any(words[base + 1 + w * _WINDOW_WORDS] - 1 >= oldest
                   for w in range(self.windows) if words[base + 1 + w * _WINDOW_WORDS])

    def row_for(self, key: int, now: float) -> int | None:
        """This part's row for ``key``, taken if need be; None when the part
        is full (every row counted another principal in the last span)."""
        row = self._own.get(key)
        if row is not None and self.words[self._base(self.part, row)] == key:
            return row
        rows, words, part = self.rows, self.words, self.part
        now_index = int(now // self.window_s)
        start = key % rows
        idle = None
        for i in range(rows):
            row = (start + i) % rows
            base = self._base(part, row)
            held = words[base]
            if held == key:
                break
            if held == 0:
                self._take(base, key)
                break
            if idle is None and not self._recent(base, now_index):
                idle = row
        else:
            if idle is None:
                return None
            row = idle
            self._take(self._base(part, row), key)
        old = self._owner_of.pop(row, None)
        if old is not None:
            self._own.pop(old, None)
        self._own[key] = row
        self._owner_of[row] = key
        return row

    def _take(self, base: int, key: int) -> None:
        words = self.words
        for i in range(1, self.row_words):
            words[base + i] = 0
        words[base] = key

    def add(self, row: int, now: float, produce: int = 0, fetch: int = 0,
            requests: int = 0) -> None:
        """Count into ``row`` of this part, in the window of ``now``."""
        index = int(now // self.window_s)
        at = self._base(self.part, row) + 1 + (index % self.windows) * _WINDOW_WORDS
        words = self.words
        if words[at] != index + 1:  # a new window in this slot: zeroed first
            words[at + 1] = words[at + 2] = words[at + 3] = 0
            words[at] = index + 1
        if produce:
            words[at + 1] += produce
        if fetch:
            words[at + 2] += fetch
        if requests:
            words[at + 3] += requests

    # -- reading (every part) -----------------------------------------------------
    def _find(self, part: int, key: int) -> int | None:
        found = self._found[part]
        row = found.get(key)
        if row is not None and self.words[self._base(part, row)] == key:
            return row
        rows, words = self.rows, self.words
        start = key % rows
        for i in range(rows):
            row = (start + i) % rows
            held = words[self._base(part, row)]
            if held == key:
                if len(found) >= rows:
                    found.clear()
                found[key] = row
                return row
            if held == 0:
                return None
        return None

    def rates(self, key: int, now: float) -> tuple[float, float, float, float]:
        """``(produce bytes/s, fetch bytes/s, requests/s, span s)`` of principal
        ``key`` over the windows kept, summed over every part: what it did in
        them over the time they span (from the start of the oldest window with
        a count, at least one window; as :class:`hostbroker.security.quota.RateWindows`)."""
        now_index = int(now // self.window_s)
        oldest = now_index - self.windows + 1
        totals = [0, 0, 0]
        first = now_index
        unpack = self._row_struct.unpack_from
        buf = self.region.buf
        for part in range(self.parts):
            row = self._find(part, key)
            if row is None:
                continue
            words = unpack(buf, HEADER_BYTES + self._base(part, row) * 8)
            if words[0] != key:
                continue
            for w in range(self.windows):
                at = 1 + w * _WINDOW_WORDS
                index = words[at] - 1
                if oldest <= index <= now_index:
                    totals[0] += words[at + 1]
                    totals[1] += words[at + 2]
                    totals[2] += words[at + 3]
                    if index < first and (words[at + 1] or words[at + 2] or words[at + 3]):
                        first = index
        span = max(self.window_s, now - first * self.window_s)
        return totals[0] / span, totals[1] / span, totals[2] / span, span

    def counted(self, part: int, key: int, now: float) -> tuple[int, int, int]:
        """``(produce bytes, fetch bytes, requests)`` of principal ``key`` in
        the windows kept of one part (one processor's share)."""
        row = self._find(part, key)
        if row is None:
            return 0, 0, 0
        words = self._row_struct.unpack_from(self.region.buf,
                                             HEADER_BYTES + self._base(part, row) * 8)
        now_index = int(now // self.window_s)
        totals = [0, 0, 0]
        for w in range(self.windows):
            at = 1 + w * _WINDOW_WORDS
            if words[0] == key and now_index - self.windows < words[at] - 1 <= now_index:
                for c in range(3):
                    totals[c] += words[at + 1 + c]
        return totals[0], totals[1], totals[2]

    def used_rows(self, part: int) -> int:
        """Rows of ``part`` ever used (for tests and the curious)."""
        return sum(1 for row in range(self.rows) if self.words[self._base(part, row)])

