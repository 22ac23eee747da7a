"""The console's rates: per second figures from two reads of counters the broker keeps.

Runs in hb-http only (single-threaded), reading shared memory read-only:

- :class:`BrokerRates` samples the process board (``hostbroker.shm.procs``)
  at most once a second and keeps the last ``SERIES_POINTS`` samples' rates:
  messages in (writers' ``messages_in``: produced messages), bytes in and out
  and requests (processors' counters: what crossed the sockets), and the
  open connections. ``/api/rates`` hands the series to the page's charts.
- :class:`PartitionRates` reads the per-partition stats tables
  (``hostbroker.shm.stats``, one per process that serves partition data),
  sums them per slot, names each slot from the partition table and keeps
  the read; the next read at least ``MIN_INTERVAL_S`` later gives each
  (topic, partition) its messages in, bytes in and bytes out per second. A
  counter that went down (its slot freed and reused, its process replaced)
  counts as a fresh start: no rate for that interval, never a negative one.

Nothing here asks the broker anything: the counters are there to be read.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from hostbroker.shm import procs
from hostbroker.shm.table import TornSlotError

SERIES_POINTS = 120  # 10 minutes at the page's 5 s poll
MIN_INTERVAL_S = 1.0  # two reads closer than this give no rate (noise, not a figure)
BROKER_SERIES = ("messages_in", "bytes_in", "bytes_out", "requests")

# process board kinds whose counters make a broker-wide rate
_WRITER, _PROCESSOR = procs.KIND_CODES["writer"], procs.KIND_CODES["processor"]
_FROM = {"messages_in": (_WRITER, procs.MESSAGES_IN), "bytes_in": (_PROCESSOR, procs.BYTES_IN),
         "bytes_out": (_PROCESSOR, procs.BYTES_OUT), "requests": (_PROCESSOR, procs.REQUESTS)}


def _per_second(now: int, before: int, seconds: float) -> float | None:
    return None if now < before else (now - before) / seconds


class BrokerRates:
    """The broker-wide series of the live charts (module doc)."""

    def __init__(self, board: Callable[[], object], clock: Callable[[], float] = time.monotonic):
        self._board = board  # () -> ProcessBoard, attached on first use
        self._clock = clock
        self._last: tuple[float, dict[str, int]] | None = None
        self.series: dict[str, deque] = {name: deque(maxlen=SERIES_POINTS)
                                         for name in BROKER_SERIES}
        self.connections = 0

    def _totals(self) -> dict[str, int]:
        totals = dict.fromkeys(BROKER_SERIES, 0)
        connections = 0
        for row in self._board().snapshot():
            if row.get("torn"):
                continue
            counters = row["counters"]
            for name, (kind, index) in _FROM.items():
                if row["kind"] == kind:
                    totals[name] += counters[procs.COUNTER_NAMES[index]]
            if row["kind"] == _PROCESSOR:
                connections += counters["connections"]
        self.connections = connections
        return totals

    def sample(self, wall: float | None = None) -> None:
        """Read the board; add a point per series when the last read is old enough."""
        now = self._clock()
        if self._last is not None and now - self._last[0] < MIN_INTERVAL_S:
            return
        totals = self._totals()
        if self._last is not None:
            seconds = now - self._last[0]
            stamp = round(wall if wall is not None else time.time(), 3)
            for name in BROKER_SERIES:
                rate = _per_second(totals[name], self._last[1][name], seconds)
                if rate is not None:  # a replaced worker restarts its counters
                    self.series[name].append((stamp, round(rate, 3)))
        self._last = (now, totals)

    def document(self) -> dict:
        return {"series": {name: list(points) for name, points in self.series.items()},
                "connections": self.connections, "points": SERIES_POINTS}


class PartitionRates:
    """Per (topic, partition) rates from two reads of the stats tables (module doc)."""

    def __init__(self, context, clock: Callable[[], float] = time.monotonic):
        self.context = context
        self._clock = clock
        self._last: tuple[float, dict[tuple[str, int], tuple[int, int, int]]] | None = None
        self._rates: dict[tuple[str, int], tuple[float, float, float]] = {}

    def _read(self) -> dict[tuple[str, int], tuple[int, int, int]] | None:
        """(topic, partition) -> (messages in, bytes in, bytes out) summed over every
        process and every slot of the partition (replicas across log dirs have a slot
        each); None when the broker keeps no partition stats."""
        try:
            from hostbroker.shm import stats
        except ImportError:
            return None
        tables = [t for _, t in self.context.partition_stats()]
        if not tables:
            return None
        table = self.context.table
        rows = table.high_water
        totals = stats.partition_totals(tables, rows)
        width = stats.COLUMN_COUNT
        try:
            slots = table.scan()
        except TornSlotError:  # a slot left mid-write: no read this time
            return None
        out: dict[tuple[str, int], tuple[int, int, int]] = {}
        for slot, record in slots:
            base = slot * width
            if base + width > len(totals):
                continue
            key = (record.name, record.partition)
            m, bi, bo = (totals[base + stats.MESSAGES_IN], totals[base + stats.BYTES_IN],
                         totals[base + stats.BYTES_OUT])
            if key in out:
                pm, pbi, pbo = out[key]
                m, bi, bo = m + pm, bi + pbi, bo + pbo
            out[key] = (m, bi, bo)
        return out

    def refresh(self, older_than: float = MIN_INTERVAL_S) -> None:
        """Read again when the last read is ``older_than`` seconds old (or there is none)."""
        now = self._clock()
        if self._last is not None and now - self._last[0] < older_than:
            return
        current = self._read()
        if current is None:
            self._last, self._rates = None, {}
            return
        if self._last is not None:
            seconds = now - self._last[0]
            before = self._last[1]
            rates = {}
            for key, figures in current.items():
                old = before.get(key)
                if old is None or any(n < o for n, o in zip(figures, old)):
                    continue
                rates[key] = tuple(round((n - o) / seconds, 3) for n, o in zip(figures, old))
            self._rates = rates
        self._last = (now, current)

    def of(self, topic: str, partition: int) -> tuple[float, float, float] | None:
        """(messages in, bytes in, bytes out) per second, None while unknown."""
        return self._rates.get((topic, partition))
