"""``hostbroker top``: a live view of a running broker's processes and counters.

Attaches read-only to the broker's process board (found from the same
configuration ``serve`` takes: the board's name derives from the broker id and
first log dir) and joins it with psutil's view of each worker process (CPU,
memory, threads). Also attaches read-only to the partition table to list the
log dirs and partitions that are offline (a failed disk, or files found
damaged at start; the broker's log says why) and the partitions with
replicas across log dirs that are under-replicated (an ISR short of a
replica, or no leader), and to the log dir table (each dir's id, state and
counts, kept by hb-logdirs; a dir its writer flags offline shows offline,
and a slot left mid-write shows ``unknown`` without stopping ``top``), and
reads the machine's CPU wake-up latency target (``cpu.wakeup.latency.us``;
root only) and the scheduling policy of each process
(``cpu.realtime.priority``). Prints a table every interval, or one JSON
document with ``--json``. Never writes to the broker's shared memory.
"""

from __future__ import annotations

import json
import sys
import time

import psutil

from hostbroker import cpulatency, cpusched
from hostbroker.config import Config
from hostbroker.shm import partitions as ptable
from hostbroker.shm.logdirs import LD_STATE_NAMES, LogDirTable, shown_state
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.procs import COUNTER_NAMES, ProcessBoard
from hostbroker.shm.table import FREE
from hostbroker.workers.plan import BrokerPlan

KIND_NAMES = {1: "writer", 2: "handler", 3: "processor", 4: "acceptor", 5: "registrar",
              6: "coordinator", 7: "replica", 8: "logdirs", 9: "http"}
_COLUMNS = ("requests", "bytes_in", "bytes_out", "messages_in", "errors", "connections",
            "fetch_parked", "wakeups")


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


def offline(table: PartitionTable, log_dirs: list[str], dirs: LogDirTable | None = None) -> dict:
    """The log dirs and partitions that are offline (they answer STORAGE_ERROR); a
    replica across log dirs is also named ``topic-partition@dir id``."""
    ids = _dir_ids(dirs)
    found = sorted((s.name, s.partition, s.owner, s.placement == ptable.PLACEMENT_LOG_DIRS)
                   for _, s in table.scan() if s.state == ptable.OFFLINE)
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


def under_replicated(table: PartitionTable) -> list[list]:
    """``[topic, partition]`` of each partition with replicas across log dirs
    whose leader's committed ISR lacks a replica, or that has no online leader."""
    replicas: dict[tuple[str, int], list] = {}
    for _, s in table.scan():
        if s.placement == ptable.PLACEMENT_LOG_DIRS and s.state != ptable.DELETING:
            replicas.setdefault((s.name, s.partition), []).append(s)
    short = []
    for key, slots in sorted(replicas.items()):
        leaders = [s for s in slots if s.role == ptable.ROLE_LEADER and s.state == ptable.ONLINE]
        if not leaders:
            short.append(list(key))
            continue
        leader = max(leaders, key=lambda s: s.leader_epoch)
        if len(leader.isr_ids) < len(leader.replicas):
            short.append(list(key))
    return short


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
           dirs: LogDirTable | None = None) -> dict:
    """One reading: broker state, a row per worker (counters and psutil figures)
    and, given the partition table, what is offline and under-replicated; given
    the log dir table, a row per log dir."""
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
        reading.update(offline(table, log_dirs or [], dirs))
        reading["under_replicated_partitions"] = under_replicated(table)
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


def render(reading: dict, previous: dict | None, seconds: float) -> str:
    """The table ``top`` prints; rates are per second since the previous reading."""
    before = {(r["kind"], r["index"]): r["counters"] for r in (previous or {}).get("workers", [])}
    target = reading.get("cpu_wakeup_latency_us")
    held = ("" if target is None else "  CPU wake-up latency " + (
        "not bounded" if target >= cpulatency.DEFAULT_US else f"{target} µs"))
    policy = reading.get("scheduling")
    realtime = f"  {policy}" if policy and policy.split()[0] in (
        cpusched.POLICY_NAMES.values()) else ""
    lines = [f"hostbroker {reading['broker_state']}  supervisor pid {reading['supervisor_pid']}"
             + held + realtime,
             f"{'process':<14}{'pid':>8}{'cpu%':>7}{'rss MiB':>9}  "
             + "".join(f"{c + '/s' if c not in ('connections', 'fetch_parked') else c:>15}"
                       for c in _COLUMNS) + f"{'wait us/req':>13}"]
    for r in reading["workers"]:
        name = r["name"] or f"{r['kind']}-{r['index']}"
        old = before.get((r["kind"], r["index"]))
        cells = []
        for c in _COLUMNS:
            value = r["counters"].get(c, 0)
            if c not in ("connections", "fetch_parked"):
                value = (value - old.get(c, 0)) / seconds if old and seconds > 0 else 0
            cells.append(f"{value:>15,.0f}")
        cells.append(f"{_wait_per_request(r['counters'], old):>13}")
        cpu = "" if r["cpu_percent"] is None else f"{r['cpu_percent']:.0f}"
        rss = "" if r["rss_bytes"] is None else f"{r['rss_bytes'] / 2**20:.0f}"
        lines.append(f"{name:<14}{r['pid']:>8}{cpu:>7}{rss:>9}  " + "".join(cells))
    lines.extend(_log_dir_table(reading.get("log_dirs", [])))
    for t, p in reading.get("under_replicated_partitions", []):
        lines.append(f"UNDER-REPLICATED partition {t}-{p}")
    for path in reading.get("offline_log_dirs", []):
        lines.append(f"OFFLINE log dir {path}")
    for p in reading.get("offline_partitions", []):
        if "replica" in p:
            lines.append(f"OFFLINE replica {p['replica']} in {p['log_dir']}")
        else:
            lines.append(f"OFFLINE partition {p['topic']}-{p['partition']} in {p['log_dir']}")
    return "\n".join(lines)


def _log_dir_table(rows: list[dict]) -> list[str]:
    """The ``log dirs`` table, for a broker with two or more (one dir holds no
    replicas across dirs)."""
    if len(rows) < 2:
        return []
    table = [("log dir", "id", "state", "replicas", "leaders", "under-replicated")]
    table += [(r["path"] or "-", str(r["id"]) if r["id"] > 0 else "-", r["state"],
               _count(r["replicas"]), _count(r["leaders"]), _count(r["under_replicated"]))
              for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _wait_per_request(now: dict, old: dict | None) -> str:
    """Microseconds a request (or answer) waited in this worker's input rings,
    on average since the previous reading; blank without requests."""
    requests = now.get("requests", 0) - (old or {}).get("requests", 0)
    if not old or requests <= 0:
        return ""
    return f"{(now.get('wait_ns', 0) - old.get('wait_ns', 0)) / requests / 1000:,.0f}"


def run(config: Config, *, as_json: bool, interval: float, iterations: int | None) -> int:
    board, table, log_dirs = attach(config)
    dirs = attach_log_dirs(config)
    procs: dict[int, psutil.Process] = {}
    previous = sample(board, procs, table, log_dirs, dirs)
    last = time.monotonic()
    count = 0
    while iterations is None or count < iterations:
        time.sleep(interval)
        reading = sample(board, procs, table, log_dirs, dirs)
        now = time.monotonic()
        if as_json:
            print(json.dumps(reading), flush=True)
        else:
            if sys.stdout.isatty():
                print("\x1b[H\x1b[2J", end="")
            print(render(reading, previous, now - last), flush=True)
        previous, last = reading, now
        count += 1
    return 0


assert set(_COLUMNS) <= set(COUNTER_NAMES)
