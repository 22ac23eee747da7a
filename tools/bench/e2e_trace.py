#!/usr/bin/env python3
"""What did the slowest messages run into? The end-to-end load under a scheduler trace.

Run by hand as root (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/e2e_trace.py
    .venv/bin/python tools/bench/e2e_trace.py --target hostbroker --messages 20000 --keep /tmp/tr

For each broker of ``--target`` (``hostbroker serve`` on its defaults plus
``--set``, and the naive broker of ``latency.py``) it runs the end-to-end
load of ``latency_loads.run_e2e`` (one message a PRODUCE at ``--rate``,
acks=1, a consumer long-polling in a process of its own) for
``--messages`` messages while the kernel's tracer (tracefs) records
``sched_switch`` and ``sched_wakeup`` on every CPU, stamped with
CLOCK_MONOTONIC, the clock the messages carry. Whatever the tracer was set
to before is put back afterwards.

An *activation* is a process's (or thread's) time on a CPU from a recorded
switch to it to its next switch away; a *long* one is longer than
``--percentile`` (99) of its process's. It prints, per process
(hostbroker's workers by name; the producer and the consumer; the naive
broker's threads one by one, a thread a connection), the activations' p50
and p99 and how many were long; then, for the slowest 1 % of messages and
for the rest, the share whose window (from send to receipt) overlaps a
long activation, and for the slowest, whose long activations they
overlap. It also counts the switches the trace left out: a switch
away from a thread that the trace never showed being switched to (some
kernels drop switches from the idle task; those CPUs then look idle in
``perf sched timehist``, while the activations counted here are not
affected).

``--keep DIR`` keeps each raw trace and the messages (JSON). A trace buffer
(``--buffer-kib`` per CPU) too small for the run drops the oldest events,
and the tool says so.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from harness import Broker, machine_info  # noqa: E402
from latency_loads import NaiveBroker, create_topics, run_e2e  # noqa: E402

TRACEFS = "/sys/kernel/tracing"
TOPIC = "lat-e2e"
EVENTS = "sched:sched_switch\nsched:sched_wakeup\n"

# "  comm-pid  (  tgid) [cpu] flags  seconds: sched_switch: prev_comm=... prev_pid=N ... ==> next_comm=... next_pid=N ..."
_SWITCH = re.compile(
    r"^\s*.+?-\d+\s+\(\s*(?P<tgid>[\d-]+)\)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+):"
    r" sched_switch: prev_comm=(?P<prev_comm>.*?) prev_pid=(?P<prev_pid>\d+) .*?"
    r"==> next_comm=(?P<next_comm>.*?) next_pid=(?P<next_pid>\d+) ")


@dataclass(frozen=True)
class Switch:
    cpu: int
    t: float  # s, CLOCK_MONOTONIC
    prev_comm: str
    prev_pid: int
    prev_tgid: int  # the switching-away task's thread group (-1: not known)
    next_pid: int


@dataclass(frozen=True)
class Activation:
    name: str
    start: float
    end: float


def parse_switches(lines: Iterable[str]) -> Iterator[Switch]:
    """The ``sched_switch`` events of a tracefs ``trace`` recorded with
    ``record-tgid``; other lines are skipped."""
    for line in lines:
        m = _SWITCH.match(line)
        if m is None:
            continue
        tgid = m["tgid"]
        yield Switch(int(m["cpu"]), float(m["ts"]), m["prev_comm"], int(m["prev_pid"]),
                     int(tgid) if tgid.strip("-") else -1, int(m["next_pid"]))


def entries_lost(lines: Iterable[str]) -> int:
    """How many events the trace buffer dropped, from the header of a tracefs
    ``trace`` ("# entries-in-buffer/entries-written: KEPT/WRITTEN"; 0 if none)."""
    for line in lines:
        if not line.startswith("#"):
            break
        m = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", line)
        if m:
            return int(m[2]) - int(m[1])
    return 0


def activations(switches: Iterable[Switch], roles: dict[int, str],
                split: frozenset[int] = frozenset()) -> tuple[list[Activation], int]:
    """Each recorded activation, named by ``roles`` (thread group -> name;
    for a group in ``split``, that name and the thread's id) or else by its
    command (the idle task's left out); and how many switches away had no
    recorded switch to them on that CPU (left out of the trace)."""
    running: dict[int, tuple[float, int]] = {}  # cpu -> (since, pid) as last recorded
    out: list[Activation] = []
    missing = 0
    for s in switches:
        last = running.get(s.cpu)
        if last is not None:
            if last[1] == s.prev_pid:
                if s.prev_pid != 0:
                    name = roles.get(s.prev_tgid, s.prev_comm)
                    if s.prev_tgid in split:
                        name = f"{name}-{s.prev_pid}"
                    out.append(Activation(name, last[0], s.t))
            else:
                missing += 1
        running[s.cpu] = (s.t, s.next_pid)
    return out, missing


def per_process(acts: list[Activation], percentile: float) -> dict[str, dict]:
    """Per name: count, p50 and p99 (µs), and its long activations: those
    longer than its ``percentile``-th percentile."""
    by: dict[str, list[Activation]] = collections.defaultdict(list)
    for a in acts:
        by[a.name].append(a)
    out = {}
    for name, items in by.items():
        d = sorted(a.end - a.start for a in items)
        bound = d[min(len(d) - 1, int(len(d) * percentile / 100))]
        out[name] = {"n": len(d), "p50_us": d[len(d) // 2] * 1e6,
                     "p99_us": d[len(d) * 99 // 100] * 1e6,
                     "long": [a for a in items if a.end - a.start > bound]}
    return out


def slowest_latency(messages: list[tuple[int, int]]) -> int:
    """The latency (ns) from which a message of ``messages`` (send ns, latency
    ns; not empty) is among the slowest 1 %."""
    ordered = sorted(lat for _, lat in messages)
    return ordered[len(ordered) * 99 // 100]


def slow_windows(messages: list[tuple[int, int]], long: list[Activation]) -> dict[str, dict]:
    """For the slowest 1 % of ``messages`` (send ns, latency ns) and for the
    rest: how many there are, and how many overlap an activation of ``long``."""
    if not messages:
        return {}
    threshold = slowest_latency(messages)
    long = sorted(long, key=lambda a: a.start)
    starts = [a.start for a in long]
    longest = max((a.end - a.start for a in long), default=0.0)

    def overlaps(a: float, b: float) -> bool:
        i = bisect.bisect_left(starts, a - longest)
        while i < len(long) and long[i].start < b:
            if long[i].end > a:
                return True
            i += 1
        return False

    out = {"slowest 1 %": [0, 0], "the rest": [0, 0]}
    for sent, lat in messages:
        key = "slowest 1 %" if lat >= threshold else "the rest"
        out[key][0] += 1
        out[key][1] += overlaps(sent / 1e9, (sent + lat) / 1e9)
    return {k: {"messages": n, "with_long": hit} for k, (n, hit) in out.items()}


def slow_by_process(messages: list[tuple[int, int]], procs: dict[str, dict]) -> dict[str, int]:
    """Per process: how many of the slowest 1 % of ``messages`` overlap one
    of its long activations (``per_process``), most first."""
    if not messages:
        return {}
    threshold = slowest_latency(messages)
    slow = [(sent / 1e9, (sent + lat) / 1e9) for sent, lat in messages if lat >= threshold]
    counts = {}
    for name, p in procs.items():
        hit = sum(1 for a, b in slow if any(x.start < b and x.end > a for x in p["long"]))
        if hit:
            counts[name] = hit
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class Tracer:
    """tracefs set to record the scheduler's switches and wake-ups, every
    setting it had put back on exit."""

    SETTINGS = ("tracing_on", "trace_clock", "buffer_size_kb", "set_event", "options/record-tgid")

    def __init__(self, buffer_kib: int, root: str = TRACEFS):
        self.root = root
        self.buffer_kib = buffer_kib
        self.saved: dict[str, str] = {}

    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def _write(self, name: str, value: str) -> None:
        with open(self._path(name), "w") as f:
            f.write(value)

    def _read(self, name: str) -> str:
        with open(self._path(name)) as f:
            return f.read()

    def __enter__(self) -> Tracer:
        for name in self.SETTINGS:
            self.saved[name] = self._read(name)
        self._write("tracing_on", "0")
        self._write("trace_clock", "mono")
        self._write("options/record-tgid", "1")
        self._write("buffer_size_kb", str(self.buffer_kib))
        self._write("set_event", EVENTS)
        self._write("trace", "")
        return self

    def start(self) -> None:
        self._write("trace", "")
        self._write("tracing_on", "1")

    def stop(self, into: str) -> None:
        self._write("tracing_on", "0")
        shutil.copyfile(self._path("trace"), into)

    def __exit__(self, *exc) -> None:
        self._write("tracing_on", "0")
        self._write("set_event", "")
        for name in self.SETTINGS:
            value = self.saved[name]
            if name == "trace_clock":  # "local global [mono] ...": the one in brackets
                value = re.search(r"\[(\S+)\]", value).group(1)
            elif name == "buffer_size_kb":  # "7 (expanded: 1408)"
                value = value.split()[0]
            elif name != "set_event":  # (set_event: as read, one event a line; "" clears)
                value = value.strip()
            with contextlib.suppress(OSError):
                self._write(name, value)


def traced_run(broker, roles: dict[int, str], a, tracer: Tracer, workdir: str, label: str,
               split: frozenset[int] = frozenset()) -> dict:
    uri = broker.uri(a.socket)
    run_e2e(uri, TOPIC, 1.0, a.rate)  # warm up
    trace_path = os.path.join(workdir, f"{label}.trace")
    tracer.start()
    try:
        r = run_e2e(uri, TOPIC, a.messages / a.rate, a.rate, keep=True)
    finally:
        tracer.stop(trace_path)
    producer, consumer = r["pids"]
    roles = {**roles, producer: "producer", consumer: "consumer"}
    with open(trace_path) as f:
        lost = entries_lost(f)
        f.seek(0)
        acts, missing = activations(parse_switches(f), roles, split)
    procs = per_process(acts, a.percentile)
    long = [x for p in procs.values() for x in p["long"]]
    out = {"latency_ms": r["latency_ms"], "messages": len(r["messages"]), "missing_switches": missing,
           "recorded_activations": len(acts), "events_lost": lost,
           "processes": {k: {"n": v["n"], "p50_us": round(v["p50_us"], 1),
                             "p99_us": round(v["p99_us"], 1), "long": len(v["long"])}
                         for k, v in sorted(procs.items()) if v["n"] >= a.min_activations},
           "windows": slow_windows(r["messages"], long),
           "slow_by_process": slow_by_process(r["messages"], procs)}
    if a.keep:
        with open(os.path.join(a.keep, f"{label}.messages.json"), "w") as f:
            json.dump(r["messages"], f)
        shutil.copyfile(trace_path, os.path.join(a.keep, f"{label}.trace"))
    os.unlink(trace_path)
    return out


def report(label: str, r: dict, percentile: float) -> None:
    lat = r["latency_ms"]
    print(f"\n{label}: {r['messages']} messages, p50 {lat['p50']:.3f} p99 {lat['p99']:.3f}"
          f" p99.9 {lat['p99.9']:.3f} ms (traced)")
    print(f"  {'process':<16}{'activations':>12}{'p50 µs':>9}{'p99 µs':>9}{'long':>7}")
    for name, p in r["processes"].items():
        print(f"  {name:<16}{p['n']:>12}{p['p50_us']:>9.0f}{p['p99_us']:>9.0f}{p['long']:>7}")
    for key, w in r["windows"].items():
        share = 100 * w["with_long"] / w["messages"] if w["messages"] else 0.0
        print(f"  {key}: {w['with_long']} of {w['messages']} ({share:.0f} %) overlap a long"
              f" activation (past its process's p{percentile:g})")
    if r["slow_by_process"]:
        print("  of the slowest 1 %, overlapping a long activation of: "
              + ", ".join(f"{k} {v}" for k, v in r["slow_by_process"].items()))
    print(f"  switches left out of the trace: {r['missing_switches']}"
          f" (beside {r['recorded_activations']} recorded activations)")
    if r["events_lost"]:
        print(f"  the trace buffer dropped {r['events_lost']} events, the oldest:"
              " raise --buffer-kib or lower --messages")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("hostbroker", "naive", "both"), default="both")
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=1000.0, help="messages/s")
    ap.add_argument("--socket", choices=("unix", "tcp"), default="tcp")
    ap.add_argument("--percentile", type=float, default=99.0,
                    help="an activation is long past this percentile of its process's")
    ap.add_argument("--min-activations", type=int, default=100,
                    help="leave processes with fewer activations out of the table")
    ap.add_argument("--buffer-kib", type=int, default=262_144, help="trace buffer per CPU")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--keep", metavar="DIR", help="keep the raw traces and messages here")
    ap.add_argument("--json-out", metavar="FILE")
    a = ap.parse_args(argv)
    if not 100 <= a.messages <= 1_000_000 or not 1 <= a.rate <= 100_000 \
            or not 50 <= a.percentile < 100:
        ap.error("--messages 100 to 1,000,000, --rate 1 to 100,000, --percentile 50 to 99.99")
    if not 1024 <= a.buffer_kib <= 1 << 20:
        ap.error("--buffer-kib 1,024 to 1,048,576 (per CPU)")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if not os.access(os.path.join(TRACEFS, "set_event"), os.W_OK):
        print(f"e2e_trace: {TRACEFS} is not writable here (root and a mounted tracefs are needed)",
              file=sys.stderr)
        return 2
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="hb-e2e-trace-")
    results = {"machine": machine_info(), "args": dict(vars(a))}
    targets = ("hostbroker", "naive") if a.target == "both" else (a.target,)
    try:
        with Tracer(a.buffer_kib) as tracer:
            for target in targets:
                if target == "hostbroker":
                    broker = Broker(os.path.join(workdir, target), a.set)
                else:
                    broker = NaiveBroker(os.path.join(workdir, target))
                os.makedirs(os.path.join(workdir, target))
                broker.start()
                try:
                    create_topics(broker.uri("unix"))
                    if target == "hostbroker":
                        results[target] = traced_run(broker, {}, a, tracer, workdir, target)
                    else:  # its threads one by one: one per connection, each its own role
                        pid = broker.proc.pid
                        results[target] = traced_run(broker, {pid: "naive"}, a, tracer, workdir,
                                                     target, frozenset({pid}))
                finally:
                    broker.stop()
                report(target, results[target], a.percentile)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
