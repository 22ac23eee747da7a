"""``hostbroker top``: a live view of a running broker's processes and counters.

Attaches read-only to the broker's process board (found from the same
configuration ``serve`` takes: the board's name derives from the broker id and
first log dir) and joins it with psutil's view of each worker process (CPU,
memory, threads). Also attaches read-only to the partition table to list the
log dirs and partitions that are offline (a failed disk, or files found
damaged at start; the broker's log says why), and reads the machine's CPU
wake-up latency target (``cpu.wakeup.latency.us``; root only) and the scheduling
policy of each process (``cpu.realtime.priority``). Prints a table
every interval, or one JSON document with ``--json``. Never writes to the
broker's shared memory.
"""

from __future__ import annotations

import json
import sys
import time

import psutil

from hostbroker import cpulatency, cpusched
from hostbroker.config import Config
from hostbroker.shm import partitions as ptable
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.procs import COUNTER_NAMES, ProcessBoard
from hostbroker.workers.plan import BrokerPlan

KIND_NAMES = {1: "writer", 2: "handler", 3: "processor", 4: "acceptor", 5: "registrar",
              6: "coordinator", 7: "replica"}
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


def offline(table: PartitionTable, log_dirs: list[str]) -> dict:
    """The log dirs and partitions that are offline (they answer STORAGE_ERROR)."""
    partitions = sorted((s.name, s.partition, s.owner) for _, s in table.scan()
                        if s.state == ptable.OFFLINE)
    return {"offline_log_dirs": [log_dirs[i] for i in sorted(table.offline_log_dirs())
                                 if i < len(log_dirs)],
            "offline_partitions": [{"topic": t, "partition": p, "log_dir": log_dirs[o]}
                                   for t, p, o in partitions if o < len(log_dirs)]}


def sample(board: ProcessBoard, procs: dict[int, psutil.Process],
           table: PartitionTable | None = None, log_dirs: list[str] | None = None) -> dict:
    """One reading: broker state, a row per worker (counters and psutil figures)
    and, given the partition table, what is offline."""
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
        reading.update(offline(table, log_dirs or []))
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
    for path in reading.get("offline_log_dirs", []):
        lines.append(f"OFFLINE log dir {path}")
    for p in reading.get("offline_partitions", []):
        lines.append(f"OFFLINE partition {p['topic']}-{p['partition']} in {p['log_dir']}")
    return "\n".join(lines)


def _wait_per_request(now: dict, old: dict | None) -> str:
    """Microseconds a request (or answer) waited in this worker's input rings,
    on average since the previous reading; blank without requests."""
    requests = now.get("requests", 0) - (old or {}).get("requests", 0)
    if not old or requests <= 0:
        return ""
    return f"{(now.get('wait_ns', 0) - old.get('wait_ns', 0)) / requests / 1000:,.0f}"


def run(config: Config, *, as_json: bool, interval: float, iterations: int | None) -> int:
    board, table, log_dirs = attach(config)
    procs: dict[int, psutil.Process] = {}
    previous = sample(board, procs, table, log_dirs)
    last = time.monotonic()
    count = 0
    while iterations is None or count < iterations:
        time.sleep(interval)
        reading = sample(board, procs, table, log_dirs)
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
