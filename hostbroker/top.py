"""``hostbroker top``: a live view of a running broker's processes and counters.

Attaches read-only to the broker's process board (found from the same
configuration ``serve`` takes: the board's name derives from the broker id and
first log dir) and joins it with psutil's view of each worker process (CPU,
memory, threads). Also attaches read-only to the partition table to list the
log dirs and partitions that are offline (a failed disk, or files found
damaged at start; the broker's log says why) and the partitions with
replicas across log dirs that are under-replicated (an ISR short of a
replica, or no leader), to the log dir table (each dir's id, state and
counts, kept by hb-logdirs; a dir its writer flags offline shows offline,
and a slot left mid-write shows ``unknown`` without stopping ``top``), and
to every worker's per-partition and per-API stats (``shm/stats.py``: the
APIs' requests, errors and latency histograms, each partition's messages
and bytes in and out), and reads the machine's CPU wake-up latency target
(``cpu.wakeup.latency.us``; root only) and the scheduling policy of each
process (``cpu.realtime.priority``). A reading (:class:`Source`) scans the
partition table once, and again only when its generation moves
(:class:`Slots`), so a refresh of 10,000 partitions stays near 50 ms of CPU
(docs/benchmarks-history.md). Reads twice, ``--interval`` apart,
before it draws (so the first screen has rates), then draws the screen of
:mod:`hostbroker.top_render` every interval, in place on a terminal (plain
lines otherwise, and with ``--once``), or prints one JSON document per
reading with ``--json``. Never writes to the broker's shared memory.
"""

from __future__ import annotations

import json
import operator
import sys
import time

import psutil

from hostbroker import cpulatency, cpusched
from hostbroker.config import Config
from hostbroker.shm import partitions as ptable
from hostbroker.shm.logdirs import LD_STATE_NAMES, LogDirTable, shown_state
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm import stats
from hostbroker.shm.procs import KIND_NAMES, ProcessBoard
from hostbroker.shm.table import FREE
from hostbroker.top_render import render  # noqa: F401 (top's screen, re-exported)
from hostbroker.workers.plan import BrokerPlan
from hostbroker.protocol.names import api_name
from hostbroker.workers.stats_record import attach_stats as attach_stats_regions


def attach(config: Config) -> tuple[ProcessBoard, PartitionTable, list[str]]:
    """The running broker's process board and partition table (read-only), and its log dirs."""
    plan = BrokerPlan.from_config(config)
    try:
        board = ProcessBoard.attach(plan.board_name, readonly=True)
        return board, PartitionTable.attach(plan.table_name, readonly=True), plan.log_dirs
    except FileNotFoundError:
        raise SystemExit(f"hostbroker top: no broker running with log.dirs "
                         f"{','.join(plan.log_dirs)} and broker.id {config['broker.id']}")


def attach_log_dirs(config: Config, err=None) -> LogDirTable | None:
    """The running broker's log dir table (read-only), or None: for a broker
    without one, and for one that cannot be read (not ours to read, or not a
    log dir table), said in one line on ``err`` (stderr); ``top`` goes on
    without the log dirs."""
    plan = BrokerPlan.from_config(config)
    try:
        return LogDirTable.attach(plan.logdirs_name, readonly=True)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # (LayoutError is a ValueError)
        print(f"hostbroker top: log dirs not shown: {exc}", file=err or sys.stderr)
        return None


def _dir_ids(dirs: LogDirTable | None) -> dict[int, int]:
    return dirs.ids() if dirs is not None else {}


def offline(table: PartitionTable, log_dirs: list[str], dirs: LogDirTable | None = None,
            slots: list | None = None) -> dict:
    """The log dirs and partitions that are offline (they answer STORAGE_ERROR); a
    replica across log dirs is also named ``topic-partition@dir id``. ``slots``:
    the table's :meth:`~hostbroker.shm.table.SlotTable.scan` when already made."""
    ids = _dir_ids(dirs)
    found = sorted((s.name, s.partition, s.owner, s.placement == ptable.PLACEMENT_LOG_DIRS)
                   for _, s in (table.scan() if slots is None else slots)
                   if s.state == ptable.OFFLINE)
    partitions = []
    for t, p, o, placed in found:
        if o >= len(log_dirs):
            continue
        entry = {"topic": t, "partition": p, "log_dir": log_dirs[o]}
        if placed:
            entry["replica"] = f"{t}-{p}@{ids.get(o, -1)}"
        partitions.append(entry)
    return {"offline_log_dirs": [log_dirs[i] for i in sorted(table.offline_log_dirs())
                                 if i < len(log_dirs)],
            "offline_partitions": partitions}


def under_replicated(table: PartitionTable, slots: list | None = None) -> list[list]:
    """``[topic, partition]`` of each partition with replicas across log dirs
    whose leader's committed ISR lacks a replica, or that has no online leader
    (``slots``: the table's scan when already made)."""
    replicas: dict[tuple[str, int], list] = {}
    for _, s in table.scan() if slots is None else slots:
        if s.placement == ptable.PLACEMENT_LOG_DIRS and s.state != ptable.DELETING:
            replicas.setdefault((s.name, s.partition), []).append(s)
    return [list(key) for key, group in sorted(replicas.items())
            if ptable.under_replicated(group)]


def log_dir_rows(dirs: LogDirTable, log_dirs: list[str],
                 flagged: set[int] | frozenset = frozenset()) -> list[dict]:
    """One row per configured log dir: id (-1: none, as every dir of a one-dir
    or cluster broker), path, state and hb-logdirs' counts. ``flagged``: the
    dirs the writers flag offline (the partition table's bitmap), shown
    offline whatever the log dir table says (:func:`shown_state`). A slot left
    mid-write is shown with state ``unknown`` and no counts."""
    rows = []
    for index in range(dirs.high_water):
        if dirs.state(index) == FREE:
            continue
        path = log_dirs[index] if index < len(log_dirs) else None
        s = dirs.slot(index)
        if s is None:
            rows.append({"id": dirs.dir_id(index), "path": path, "state": "unknown",
                         "replicas": None, "leaders": None, "under_replicated": None,
                         "offline_replicas": None})
            continue
        state = shown_state(s.state, index in flagged)
        rows.append({"id": s.dir_id, "path": path,
                     "state": LD_STATE_NAMES.get(state, str(state)),
                     "replicas": s.replicas, "leaders": s.leaders,
                     "under_replicated": s.under_replicated,
                     "offline_replicas": s.offline_replicas})
    return rows


def sample(board: ProcessBoard, procs: dict[int, psutil.Process],
           table: PartitionTable | None = None, log_dirs: list[str] | None = None,
           dirs: LogDirTable | None = None, slots: list | None = None) -> dict:
    """One reading: broker state, a row per worker (counters and psutil figures)
    and, given the partition table, what is offline and under-replicated; given
    the log dir table, a row per log dir. ``slots``: the table's scan when
    already made (a scan of 10,000 partitions takes tens of ms: one a reading)."""
    rows = []
    for row in board.snapshot():
        if row.get("torn"):
            continue
        pid = row["pid"]
        info = {"name": None, "cpu_percent": None, "rss_bytes": None, "threads": None,
                "scheduling": cpusched.describe(pid) if pid else None}
        if pid:
            try:
                p = procs.get(pid)
                if p is None:
                    p = procs[pid] = psutil.Process(pid)
                    p.cpu_percent(None)  # first call primes the measurement
                with p.oneshot():
                    info.update(name=p.name(), cpu_percent=p.cpu_percent(None),
                                rss_bytes=p.memory_info().rss, threads=p.num_threads())
            except psutil.Error:
                procs.pop(pid, None)
        rows.append({"kind": KIND_NAMES.get(row["kind"], str(row["kind"])),
                     "index": row["index"], "pid": pid, "epoch": row["epoch"],
                     "state": row["state"].name.lower(), **info,
                     "counters": dict(row["counters"])})
    reading = {"broker_state": board.broker_state.name.lower(),
               "supervisor_pid": board.supervisor_pid,
               "cpu_wakeup_latency_us": _cpu_wakeup_latency(),
               "scheduling": cpusched.describe(board.supervisor_pid)
               if board.supervisor_pid else None, "workers": rows}
    if table is not None:
        if slots is None:
            slots = table.scan()
        reading.update(offline(table, log_dirs or [], dirs, slots))
        reading["under_replicated_partitions"] = under_replicated(table, slots)
    if dirs is not None:
        flagged = table.offline_log_dirs() if table is not None else frozenset()
        reading["log_dirs"] = log_dir_rows(dirs, log_dirs or [], flagged)
    return reading


def _cpu_wakeup_latency() -> int | None:
    """The machine's CPU wake-up latency target in force, µs (None: not readable,
    as for anyone but root)."""
    try:
        return cpulatency.current()
    except cpulatency.CpuLatencyError:
        return None


def attach_stats(board: ProcessBoard, config: Config, err=None) -> tuple[list, list]:
    """Read-only handles on the per-partition and per-API stats of every
    worker the board lists (``shm/stats.py``): ``([], [])`` for a broker
    that keeps none, and for stats that cannot be read, said in one line on
    ``err`` (stderr); ``top`` goes on without them."""
    plan = BrokerPlan.from_config(config)
    workers = sorted({(KIND_NAMES[row["kind"]], row["index"]) for row in board.snapshot()
                      if not row.get("torn") and row["kind"] in KIND_NAMES})
    try:
        return attach_stats_regions(plan, workers)
    except (OSError, ValueError) as exc:  # (LayoutError is a ValueError)
        print(f"hostbroker top: partition and API stats not shown: {exc}",
              file=err or sys.stderr)
        return [], []


_COUNTED = frozenset(int(s) for s in (ptable.ONLINE, ptable.OFFLINE, ptable.CREATING))
assert stats.PARTITION_COLUMNS == ("messages_in", "bytes_in", "bytes_out", "fetches")


def stats_reading(partition_stats: list, api_stats: list,
                  table: PartitionTable | None, slots: list | None = None) -> dict:
    """The stats part of a reading: ``api`` (name -> requests, errors,
    latency_sum_ns, cumulative buckets) and ``partitions`` (topic,
    partition and the four counts of each partition with any), summed over
    the processes (``slots``: the table's scan when already made)."""
    out: dict = {}
    if api_stats:
        merged = stats.merge_api(a.snapshot() for a in api_stats)
        out["api"] = {api_name(key): {"requests": r, "errors": e, "latency_sum_ns": s,
                                      "buckets": list(b)}
                      for key, (r, e, s, b) in sorted(merged.items())}
    if partition_stats and table is not None:
        kept = [(slot, s.name, s.partition)
                for slot, s in (table.scan() if slots is None else slots)
                if s.state in _COUNTED]
        rows = max((slot for slot, _, _ in kept), default=-1) + 1
        totals = stats.partition_totals(partition_stats, rows)
        width = stats.COLUMN_COUNT
        msgs, ins, outs, fetches = (totals[c::width] for c in range(width))  # by slot
        none = (0, 0, 0, 0)
        summed: dict[tuple[str, int], tuple] = {}  # (a partition's replicas across dirs)
        for slot, topic, partition in kept:
            counts = (msgs[slot], ins[slot], outs[slot], fetches[slot])
            if counts != none:
                have = summed.get((topic, partition))
                summed[(topic, partition)] = (counts if have is None
                                              else tuple(map(operator.add, have, counts)))
        out["partitions"] = [{"topic": t, "partition": p, "messages_in": m, "bytes_in": i,
                              "bytes_out": o, "fetches": f}
                             for (t, p), (m, i, o, f) in sorted(summed.items())]
    return out


def screen(text: str, tty: bool) -> str:
    """What one draw writes: on a terminal, the cursor home, each line over
    the last screen's (cleared to its end), then the rest of the screen
    cleared, so it refreshes in place without a flash; else plain lines."""
    if not tty:
        return text + "\n"
    return "\x1b[H" + "".join(line + "\x1b[K\n" for line in text.split("\n")) + "\x1b[J"


class Slots:
    """The partition table's slots as a reading needs them, without reading
    every slot every time: the table is scanned again only when slots were
    added or freed (its generation moved); otherwise a slot is read again
    only when its state changed (one aligned load each) or it is a replica
    across log dirs (its role and ISR change in place). A topic's name,
    partition, log dir and placement stay while its slot is taken."""

    def __init__(self, table: PartitionTable):
        self.table = table
        self._generation: int | None = None
        self._records: dict[int, tuple] = {}

    def scan(self) -> list[tuple[int, tuple]]:
        """``(index, record)`` of every slot in use, as :meth:`SlotTable.scan`."""
        table = self.table
        generation = table.generation  # before the scan: a change during it shows next time
        if generation != self._generation:
            found = table.scan()
            self._records, self._generation = dict(found), generation
            return found
        records, state = self._records, table.state
        found = []
        for i, record in records.items():
            if state(i) != record.state or record.placement == ptable.PLACEMENT_LOG_DIRS:
                record = records[i] = table.read(i)
            if record.state != FREE:  # (freed, its generation not yet bumped)
                found.append((i, record))
        return found


class Source:
    """Everything ``top`` reads from one running broker, attached read-only
    once (:func:`attach`, :func:`attach_log_dirs`, :func:`attach_stats`):
    :meth:`read` makes one reading."""

    def __init__(self, config: Config, err=None):
        self.board, self.table, self.log_dirs = attach(config)
        self.dirs = attach_log_dirs(config, err)
        self.partition_stats, self.api_stats = attach_stats(self.board, config, err)
        self.procs: dict[int, psutil.Process] = {}
        self.slots = Slots(self.table)

    def read(self) -> dict:
        slots = self.slots.scan()  # once a reading: what is offline, under-replicated, named
        reading = sample(self.board, self.procs, self.table, self.log_dirs, self.dirs, slots)
        reading.update(stats_reading(self.partition_stats, self.api_stats, self.table, slots))
        return reading


def run(config: Config, *, as_json: bool, interval: float, iterations: int | None,
        once: bool = False) -> int:
    """Sample, wait ``interval``, sample again and draw (so the first screen
    has rates), and so on: ``iterations`` draws (``once``: one), or until
    interrupted."""
    source = Source(config)
    read = source.read
    if once:
        iterations = 1
    tty = sys.stdout.isatty() and not once and not as_json
    previous = read()
    last = time.monotonic()
    count = 0
    if tty:
        sys.stdout.write("\x1b[2J")  # once: later draws overwrite in place
    while iterations is None or count < iterations:
        time.sleep(interval)
        reading = read()
        now = time.monotonic()
        if as_json:
            print(json.dumps(reading), flush=True)
        else:
            sys.stdout.write(screen(render(reading, previous, now - last), tty))
            sys.stdout.flush()
        previous, last = reading, now
        count += 1
    return 0

