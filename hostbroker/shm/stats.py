"""Per-partition and per-API counters in shared memory, one region per process.

Owns: two layouts of plain u64 counters, :class:`PartitionStats` and
:class:`ApiStats`. Each process that records keeps its own region of each
(named by ``plan.stats_name(kind, index)`` and ``plan.api_stats_name(kind,
index)``); the supervisor creates them before it forks, the process alone
adds to its own, and anyone (the HTTP worker's collectors, ``hostbroker
top``) attaches read-only and sums over the processes. Nothing here knows
what a partition or an API is: a row is an index, a key is a number.

Why one region per process: a counter then has one writer, so an add is a
plain load and store of one aligned u64 (no lock, no atomic instruction),
and two processes never write the same cache line. A restarted process
attaches the region its predecessor used and keeps counting from there.
Nothing but its own process ever writes a region, not even to clear it: a
``+=`` of Python is a load, an add and a store, so a clear by anyone else
could be undone by an add that loaded before it, bringing the whole old
count back.

Readers load each u64 whole (one aligned load, x86-64) but a row read
while it is written may mix moments, as the process board's counters
do: fine for totals and rates, never for anything that must add up.

Partition stats (layout ``b"PSTA"``)::

    offset  size  field
    0       4     magic      b"PSTA"
    4       4     version    2
    8       4     rows       how many rows (``max.partitions``: one per partition slot)
    12      4     columns    4 (counters a row)
    16      48    reserved
    64            row 0, row 1, ... each 5 x u64 (40 bytes):
                  claim, messages_in, bytes_in, bytes_out, fetches

Row ``i`` counts for partition slot ``i`` of the partition table, under
the slot's ``claims`` (``shm/partitions.py``: how many times the slot was
freed) written in the row's ``claim`` word. A slot freed and taken again
must not carry its old counts into the new partition, so:

- a process about to add to a row whose ``claim`` is not the slot's
  ``claims`` zeroes its counters and then writes the new ``claim``
  (:meth:`PartitionStats.restamp`); the writer that frees a slot does so at
  once, so its row carries the slot's newest claim from then on;
- readers (:func:`partition_totals`) sum, per row, only the rows whose
  ``claim`` is the highest among the processes' (the slot's current one):
  the rows of processes that have not counted the slot since it was freed
  are left out.

``claim`` is the row's first word: a reader (which loads a row in address
order) that sees a new ``claim`` sees the counters zeroed before it was
written. A count added for the old partition after the free (a FETCH
answered as the topic was deleted) goes to the new claim: at most one
answer's worth, never the old totals.

API stats (layout ``b"ASTA"``)::

    offset  size  field
    0       4     magic      b"ASTA"
    4       4     version    1
    8       4     keys       32 (api keys 0..31)
    12      4     words      words per key (16)
    16      48    reserved
    64            key 0, key 1, ... each 16 x u64 (128 bytes):
                  0  requests
                  1  errors
                  2  latency_sum_ns
                  3  .. 14  requests whose latency fell in bucket 0 .. 11
                            (not cumulative: each request adds to one bucket
                            at most; above the last bound, to none)
                  15 reserved

Bucket ``b`` holds latencies in (LATENCY_BOUNDS[b-1], LATENCY_BOUNDS[b]]
seconds; :meth:`ApiStats.snapshot` gives them cumulative, as Prometheus'
``le`` buckets are, and ``requests`` is the ``+Inf`` bucket.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator

from hostbroker.shm.region import SharedRegion, Structure, tag_magic

HEADER_BYTES = 64
_HEADER = struct.Struct("<IIII")

# -- partition stats ---------------------------------------------------------
# the counters' columns (a row's words 1..4, after its claim)
MESSAGES_IN = 0
BYTES_IN = 1
BYTES_OUT = 2
FETCHES = 3
PARTITION_COLUMNS = ("messages_in", "bytes_in", "bytes_out", "fetches")
COLUMN_COUNT = len(PARTITION_COLUMNS)
CLAIM = 0  # a row's first word: the slot's claims it counts under
ROW_WORDS = 1 + COLUMN_COUNT
_ZEROS = (0,) * COLUMN_COUNT

# -- API stats ---------------------------------------------------------------
API_KEYS = 32
REQUESTS = 0
ERRORS = 1
LATENCY_SUM_NS = 2
FIRST_BUCKET = 3
LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BUCKET_COUNT = len(LATENCY_BOUNDS)
_BOUNDS_NS = tuple(round(b * 1e9) for b in LATENCY_BOUNDS)
KEY_WORDS = 16  # 3 + 12 buckets + 1 reserved: a key is two cache lines


def _create(cls, region_or_name: SharedRegion | str, size: int, count: int, width: int):
    """A new ``cls`` over ``size`` zeroed bytes whose header (magic and version
    first, as every structure's) says ``count`` rows of ``width`` words."""
    region, opened = cls._open(region_or_name, size)
    try:
        region.buf[:size] = bytes(size)
        _HEADER.pack_into(region.buf, 0, cls.MAGIC, cls.VERSION, count, width)
        return cls(region, opened)
    except BaseException:
        if opened:
            region.close()
            region.unlink()
        raise


class PartitionStats(Structure):
    """One process's counts per partition slot (module docstring)."""

    MAGIC = tag_magic(b"PSTA")
    VERSION = 2  # 2: a row's claim word

    def __init__(self, region: SharedRegion, opened: bool):
        super().__init__(region, opened)
        self._check_stamp()
        _, _, rows, columns = _HEADER.unpack_from(region.buf, 0)
        if columns != COLUMN_COUNT or region.size < self.region_size(rows):
            raise ValueError(f"{region.name}: {rows} rows of {columns} do not fit "
                             f"{region.size} bytes")
        self.row_count = rows
        self.words = self._view(HEADER_BYTES, self.region_size(rows), "Q")

    @staticmethod
    def region_size(rows: int) -> int:
        return HEADER_BYTES + rows * ROW_WORDS * 8

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, rows: int) -> PartitionStats:
        """Zeroed counts for ``rows`` partition slots (the supervisor's)."""
        if rows <= 0:
            raise ValueError("partition stats need at least one row")
        return _create(cls, region_or_name, cls.region_size(rows), rows, COLUMN_COUNT)

    @classmethod
    def attach(cls, region_or_name: SharedRegion | str, readonly: bool = False) -> PartitionStats:
        return cls._attach(region_or_name, readonly)

    def add(self, slot: int, column: int, n: int = 1, claim: int | None = None) -> None:
        """Add ``n`` to ``column`` of row ``slot`` (the owning process only),
        under the slot's ``claim`` when given (:meth:`restamp` first if the
        row counts under another). Hot paths add to :attr:`words` at
        ``slot * ROW_WORDS + 1 + column`` themselves; this checks the bounds."""
        if not 0 <= slot < self.row_count or not 0 <= column < COLUMN_COUNT:
            raise IndexError(f"partition stats row {slot} column {column} out of range")
        base = slot * ROW_WORDS
        if claim is not None and self.words[base] != claim:
            self.restamp(slot, claim)
        self.words[base + 1 + column] += n

    def restamp(self, slot: int, claim: int) -> None:
        """Zero row ``slot``'s counters, then make it count under ``claim``
        (the owning process only; module docstring)."""
        base = slot * ROW_WORDS
        words = self.words
        for column in range(1, ROW_WORDS):
            words[base + column] = 0
        words[base + CLAIM] = claim

    def claim(self, slot: int) -> int:
        """The claim row ``slot`` counts under."""
        return self.words[slot * ROW_WORDS + CLAIM]

    def row(self, slot: int) -> tuple[int, int, int, int]:
        """(messages_in, bytes_in, bytes_out, fetches) of ``slot``."""
        if not 0 <= slot < self.row_count:
            raise IndexError(f"partition stats row {slot} not in 0..{self.row_count - 1}")
        base = slot * ROW_WORDS
        return tuple(self.words[base + 1:base + ROW_WORDS])

    def flat(self, rows: int | None = None) -> tuple[int, ...]:
        """The first ``rows`` rows (all when None) as one flat tuple,
        ``ROW_WORDS`` words a row (its claim first): one copy, for readers
        of many rows."""
        rows = self.row_count if rows is None else max(0, min(rows, self.row_count))
        return struct.unpack_from(f"<{rows * ROW_WORDS}Q", self.region.buf, HEADER_BYTES)

    def rows(self, rows: int | None = None) -> Iterator[tuple[int, tuple[int, ...]]]:
        """(slot, counters) for every row with a count, among the first ``rows``."""
        values = self.flat(rows)
        for slot in range(len(values) // ROW_WORDS):
            row = values[slot * ROW_WORDS + 1:(slot + 1) * ROW_WORDS]
            if any(row):
                yield slot, row


def partition_totals(tables: Iterable[PartitionStats], rows: int) -> list[int]:
    """The first ``rows`` rows summed over ``tables`` (one per process), flat:
    ``COLUMN_COUNT`` values a row, row ``s`` at ``s * COLUMN_COUNT``. A
    row counts only where its claim is the highest of the tables' (the
    slot's current claim, module docstring)."""
    flats = [t.flat(rows) for t in tables]
    if not flats:
        return [0] * (max(0, rows) * COLUMN_COUNT)
    n = min(len(f) for f in flats) // ROW_WORDS
    width = n * ROW_WORDS
    claims = [f[CLAIM:width:ROW_WORDS] for f in flats]
    current = claims[0] if len(claims) == 1 else tuple(map(max, *claims))
    kept = []
    for f, claim in zip(flats, claims):
        if claim != current:  # a row of an earlier claim counts nothing
            f = list(f[:width])
            for slot in [s for s, (a, b) in enumerate(zip(claim, current)) if a != b]:
                f[slot * ROW_WORDS + 1:(slot + 1) * ROW_WORDS] = _ZEROS
        kept.append(f)
    out = [0] * (n * COLUMN_COUNT)
    for column in range(COLUMN_COUNT):
        at = 1 + column
        values = [f[at:width:ROW_WORDS] for f in kept]
        out[column::COLUMN_COUNT] = values[0] if len(values) == 1 else list(map(sum, zip(*values)))
    return out


class ApiStats(Structure):
    """One process's requests, errors and latency histogram per api key."""

    MAGIC = tag_magic(b"ASTA")
    VERSION = 1

    def __init__(self, region: SharedRegion, opened: bool):
        super().__init__(region, opened)
        self._check_stamp()
        _, _, keys, words = _HEADER.unpack_from(region.buf, 0)
        if keys != API_KEYS or words != KEY_WORDS or region.size < self.region_size():
            raise ValueError(f"{region.name}: not {API_KEYS} api keys of {KEY_WORDS} words")
        self.words = self._view(HEADER_BYTES, self.region_size(), "Q")

    @staticmethod
    def region_size() -> int:
        return HEADER_BYTES + API_KEYS * KEY_WORDS * 8

    @classmethod
    def create(cls, region_or_name: SharedRegion | str) -> ApiStats:
        return _create(cls, region_or_name, cls.region_size(), API_KEYS, KEY_WORDS)

    @classmethod
    def attach(cls, region_or_name: SharedRegion | str, readonly: bool = False) -> ApiStats:
        return cls._attach(region_or_name, readonly)

    def request(self, api_key: int, latency_ns: int) -> None:
        """One answer of ``api_key`` handed over for writing, ``latency_ns``
        after its frame arrived (the processor's). Keys outside 0..31 are
        not counted (the broker answers those with an error and a close)."""
        if 0 <= api_key < API_KEYS:
            words = self.words
            base = api_key * KEY_WORDS
            words[base] += 1
            if latency_ns > 0:
                words[base + LATENCY_SUM_NS] += latency_ns
            bucket = bisect.bisect_left(_BOUNDS_NS, latency_ns)
            if bucket < BUCKET_COUNT:
                words[base + FIRST_BUCKET + bucket] += 1

    def error(self, api_key: int, n: int = 1) -> None:
        """An answer of ``api_key`` carrying an error code (top level or any
        partition's), counted where the answer is built."""
        if 0 <= api_key < API_KEYS:
            self.words[api_key * KEY_WORDS + ERRORS] += n

    def key(self, api_key: int) -> tuple[int, int, int, tuple[int, ...]]:
        """(requests, errors, latency_sum_ns, cumulative buckets) of one key."""
        base = api_key * KEY_WORDS
        raw = tuple(self.words[base:base + KEY_WORDS])
        return _figures(raw)

    def snapshot(self) -> dict[int, tuple[int, int, int, tuple[int, ...]]]:
        """api_key -> (requests, errors, latency_sum_ns, buckets) for every key
        with a request or an error; ``buckets`` are cumulative (bucket ``b``
        counts latencies up to ``LATENCY_BOUNDS[b]``)."""
        values = struct.unpack_from(f"<{API_KEYS * KEY_WORDS}Q", self.region.buf, HEADER_BYTES)
        out = {}
        for api_key in range(API_KEYS):
            raw = values[api_key * KEY_WORDS:(api_key + 1) * KEY_WORDS]
            if raw[REQUESTS] or raw[ERRORS]:
                out[api_key] = _figures(raw)
        return out


def _figures(raw: tuple[int, ...]) -> tuple[int, int, int, tuple[int, ...]]:
    buckets = []
    running = 0
    for count in raw[FIRST_BUCKET:FIRST_BUCKET + BUCKET_COUNT]:
        running += count
        buckets.append(running)
    # A reader may load a bucket added after it loaded requests: never let a
    # bucket pass +Inf, which Prometheus would take for a broken histogram.
    requests = max(raw[REQUESTS], running)
    return requests, raw[ERRORS], raw[LATENCY_SUM_NS], tuple(buckets)


def merge_api(snapshots: Iterable[dict]) -> dict[int, tuple[int, int, int, tuple[int, ...]]]:
    """Several processes' :meth:`ApiStats.snapshot` summed key by key."""
    out: dict[int, list] = {}
    for snap in snapshots:
        for api_key, (requests, errors, sum_ns, buckets) in snap.items():
            have = out.get(api_key)
            if have is None:
                out[api_key] = [requests, errors, sum_ns, list(buckets)]
            else:
                have[0] += requests
                have[1] += errors
                have[2] += sum_ns
                have[3] = [a + b for a, b in zip(have[3], buckets)]
    return {k: (v[0], v[1], v[2], tuple(v[3])) for k, v in out.items()}
