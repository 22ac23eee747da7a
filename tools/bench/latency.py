#!/usr/bin/env python3
"""Where does a request's time go? Latency and one-client throughput of hostbroker against a
naive broker in one run, with the broker's per-stage counters.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/latency.py                      # everything, both brokers
    .venv/bin/python tools/bench/latency.py --phases rtt,e2e --target both --json-out r.json

Starts a real ``hostbroker serve`` (``harness.Broker``, TCP and a
Unix socket, data in a temporary directory, ``--set`` passed through) and
``naive_broker.py`` (one process, a thread per connection, no shared memory),
and measures both **in the same run, interleaved** (hostbroker, naive,
hostbroker, naive ...), each measurement ``--repeats`` times; it reports the
best and the median run and the ratio hostbroker / naive of each (for a
latency lower is better, for a rate higher is better). Phases:

- ``rtt``: METADATA round trip, one client, one request at a time, over TCP
  and a Unix socket; quiet, and "busy" with one process spinning on a core
  beside it. p50, p99, p99.9.
- ``e2e``: end to end: a producer sends 100-byte messages, one per PRODUCE
  (acks=1), paced at ``--e2e-rate``/s; a consumer process long-polls (FETCH
  max_wait 100 ms, min_bytes 1). Latency = the consumer's receive time minus
  the send time stamped in the payload (``time.monotonic_ns``). Quiet.
- ``api``: per-API percentiles at idle, moderate and full load
  (``hostbroker.commands.perf_latency.measure``, as ``hostbroker perf latency``).
- ``sync``: one client, 1,000-message sets of 100 B, acks=1, one request at
  a time: messages/s.
- ``pipelined``: the same with 16 requests in flight: messages/s.
- ``large``: 10 KiB messages in sets of 100 (~1 MiB requests) from one
  pipelined client (4 in flight): MB/s of log bytes, against a ``dd``
  page-cache write of the same size in the same repetition; and fetching
  them back (contiguous 4 MiB ranges, 4 in flight, bytes not parsed): MB/s
  against a loopback ``os.sendfile`` in the same repetition; then the same
  sets from one synchronous client (one request at a time): MB/s.
  ``--warm-mib N`` writes and deletes N MiB before each ``dd`` and each
  produce, so that all of them find memory the guest has just freed (on a
  VM that gives freed memory back to its host, the page cache is otherwise
  ten times slower for whichever comes first).

``--nice N`` and ``--rr PRIO`` run both brokers at a nice value or under
the real-time SCHED_RR policy (hostbroker by ``cpu.realtime.priority``); the
clients keep the priority the benchmark was started with (``chrt -r PRIO``
gives it to them too). Beside other work they show how much of the tail
is the scheduler's.

For hostbroker each phase also reads the broker's stage counters
(``latency_stages``) before and after, and prints where the time goes per
process kind. Every load is bounded in time; the default run takes about
five minutes. The machine is shared: before quiet phases it waits (up to
``--wait-quiet`` s) for an idle second and records how busy it was.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, REPO]

from harness import MIB, Broker, log, machine_info, output, wait_quiet  # noqa: E402
from latency_loads import (  # noqa: E402
    NaiveBroker,
    busy_neighbour,
    create_topics,
    reprioritize,
    run_api,
    run_e2e,
    run_fetch,
    run_pipelined,
    run_rtt,
    warm_free_memory,
)
from latency_stages import StageCounters, add, delta, format_where, per_request  # noqa: E402
from machine_limits import measure_pagecache, measure_sendfile  # noqa: E402

PHASES = ("rtt", "e2e", "api", "sync", "pipelined", "large")
TARGETS = ("hostbroker", "naive")


# -- the run ---------------------------------------------------------------

def stats(values: list[float], higher_is_better: bool) -> dict:
    if not values:
        return {"runs": [], "best": None, "median": None}
    best = max(values) if higher_is_better else min(values)
    return {"runs": [round(v, 4) for v in values], "best": round(best, 4),
            "median": round(statistics.median(values), 4)}


class Run:
    """Figures collected over the repetitions: ``figures[metric][target] = [values]``."""

    def __init__(self, targets: dict, counters: StageCounters | None, args):
        self.targets = targets
        self.counters = counters
        self.args = args
        self.figures: dict[str, dict[str, list[float]]] = {}
        self.higher: dict[str, bool] = {}
        self.stages: dict[str, dict] = {}
        self.stage_requests: dict[str, int] = {}
        self.raw: list[dict] = []

    def record(self, metric: str, target: str, value, higher_is_better: bool) -> None:
        if value is None:
            return
        self.figures.setdefault(metric, {}).setdefault(target, []).append(value)
        self.higher[metric] = higher_is_better

    def timed(self, phase: str, target: str, work, requests_of=None):
        """Run ``work()``; for hostbroker, add its stage counter deltas to ``phase``."""
        before = self.counters.read() if target == "hostbroker" and self.counters else None
        result = work()
        if before is not None:
            self.stages[phase] = add(self.stages.setdefault(phase, {}),
                                     delta(before, self.counters.read()))
            self.stage_requests[phase] = (self.stage_requests.get(phase, 0)
                                          + (requests_of(result) if requests_of else 0))
        self.raw.append({"phase": phase, "target": target, "result": result})
        return result

    def summary(self) -> dict:
        out = {}
        for metric, by_target in self.figures.items():
            higher = self.higher[metric]
            row = {t: stats(v, higher) for t, v in by_target.items()}
            hb, naive = row.get("hostbroker"), row.get("naive")
            if hb and naive and hb["best"] and naive["best"]:
                row["ratio_best"] = round(hb["best"] / naive["best"], 3)
                row["ratio_median"] = round(hb["median"] / naive["median"], 3)
            row["higher_is_better"] = higher
            out[metric] = row
        return out


def _percentiles(run: Run, prefix: str, target: str, result: dict) -> None:
    for key, value in (result.get("latency_ms") or {}).items():
        if key != "max":
            run.record(f"{prefix} {key} ms", target, value, False)


def _requests(result: dict) -> int:
    return result.get("requests", 0)


def phase_rtt(run: Run, a) -> None:
    for rep in range(a.repeats):
        for busy in (False, True):
            if not busy and a.wait_quiet:
                run.record("machine busy before quiet rtt", "machine", wait_quiet(a.wait_quiet),
                           False)
            ctx = busy_neighbour(a.seconds * 4 + 10) if busy else contextlib.nullcontext()
            with ctx:
                for kind in ("tcp", "unix"):
                    for name, broker in run.targets.items():
                        label = f"rtt METADATA {kind} {'busy' if busy else 'quiet'}"
                        log(f"[{rep + 1}/{a.repeats}] {label} {name}")
                        result = run.timed(f"rtt {'busy' if busy else 'quiet'}", name,
                                           lambda: run_rtt(broker.uri(kind), "lat-rtt",
                                                           a.seconds), _requests)
                        _percentiles(run, label, name, result)


def phase_e2e(run: Run, a) -> None:
    for rep in range(a.repeats):
        if a.wait_quiet:
            run.record("machine busy before e2e", "machine", wait_quiet(a.wait_quiet), False)
        for name, broker in run.targets.items():
            log(f"[{rep + 1}/{a.repeats}] e2e {a.e2e_rate:g} msgs/s {name}")
            result = run.timed("e2e", name, lambda: run_e2e(broker.uri(a.kind), "lat-e2e",
                                                            a.e2e_seconds, a.e2e_rate),
                               lambda r: r["sent"] + r["fetches"])
            _percentiles(run, f"e2e {a.e2e_rate:g}/s", name, result)


def phase_api(run: Run, a) -> None:
    for rep in range(a.repeats):
        for name, broker in run.targets.items():
            log(f"[{rep + 1}/{a.repeats}] api idle/moderate/full {name}")
            result = run.timed("api", name, lambda: run_api(broker.uri(a.kind), "lat-api",
                                                            a.seconds, a.clients),
                               lambda r: sum(x["requests"] for loads in r.values()
                                             for x in loads.values()))
            for api_name, loads in result.items():
                for load, r in loads.items():
                    _percentiles(run, f"api {api_name} {load}", name, r)
                    if load == "full":
                        run.record(f"api {api_name} capacity req/s", name,
                                   r["requests_per_s"], True)


def phase_sync(run: Run, a) -> None:
    for rep in range(a.repeats):
        for name, broker in run.targets.items():
            log(f"[{rep + 1}/{a.repeats}] sync produce {name}")
            r = run.timed("sync", name, lambda: run_pipelined(broker.uri(a.kind), "lat-sync",
                                                              a.seconds, 100, 1000, 1),
                          _requests)
            run.record("sync produce 100 B msgs/s", name, r["msgs_per_s"], True)


def phase_pipelined(run: Run, a) -> None:
    for rep in range(a.repeats):
        for name, broker in run.targets.items():
            log(f"[{rep + 1}/{a.repeats}] pipelined produce {name}")
            r = run.timed("pipelined", name, lambda: run_pipelined(
                broker.uri(a.kind), "lat-pipe", a.seconds, 100, 1000, 16), _requests)
            run.record("pipelined produce 100 B msgs/s", name, r["msgs_per_s"], True)


def phase_large(run: Run, a) -> None:
    for rep in range(a.repeats):
        log(f"[{rep + 1}/{a.repeats}] dd and sendfile")
        warm_free_memory(a.workdir, a.warm_mib)
        pc = measure_pagecache(a.workdir, a.dd_mib, 1, 0)
        sf = measure_sendfile(a.workdir, min(256, a.dd_mib), a.dd_mib, 4 * MIB, 1)
        run.record("dd page-cache write MB/s (fresh file)", "machine", pc["fresh_file_mb_s"], True)
        run.record(f"sendfile loopback {a.kind} MB/s", "machine", sf[f"{a.kind}_mb_s"], True)
        for name, broker in run.targets.items():
            log(f"[{rep + 1}/{a.repeats}] 10 KiB produce and fetch {name}")
            uri = broker.uri(a.kind)
            warm_free_memory(a.workdir, a.warm_mib)
            p = run.timed("large", name, lambda: run_pipelined(
                uri, "lat-large", a.seconds, 10 * 1024, 100, 4, a.dd_mib * MIB), _requests)
            f = run.timed("large", name, lambda: run_fetch(uri, "lat-large", p["start"], p["end"],
                                                           a.seconds), _requests)
            warm_free_memory(a.workdir, a.warm_mib)
            s = run.timed("large", name, lambda: run_pipelined(
                uri, "lat-large", a.seconds, 10 * 1024, 100, 1, a.dd_mib * MIB), _requests)
            run.record("10 KiB produce MB/s", name, p["mb_per_s"], True)
            run.record("10 KiB sync produce MB/s", name, s["mb_per_s"], True)
            run.record("10 KiB fetch MB/s", name, f["mb_per_s"], True)
            run.record("10 KiB produce / dd", name, p["mb_per_s"] / pc["fresh_file_mb_s"], True)
            run.record("10 KiB fetch / sendfile", name, f["mb_per_s"] / sf[f"{a.kind}_mb_s"], True)


PHASE_FUNCS = {"rtt": phase_rtt, "e2e": phase_e2e, "api": phase_api, "sync": phase_sync,
               "pipelined": phase_pipelined, "large": phase_large}


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"machine: {m['nproc']} CPUs ({m['cpu_model']}), Linux {m['kernel']}, "
          f"Python {m['python']}, hostbroker {m['git']}, load at start "
          f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}")
    print(f"{report['repeats']} repetitions, interleaved; clients on {report['kind']} except "
          "rtt (both); ratio = hostbroker / naive (latency: lower is better)")
    print()
    print(f"{'measure':46} {'hostbroker best/median':>24} {'naive best/median':>22} "
          f"{'ratio best/median':>18}")
    for metric, row in report["summary"].items():
        def cell(target: str) -> str:
            r = row.get(target)
            return "" if not r or r["best"] is None else f"{r['best']:.4g} / {r['median']:.4g}"

        if "machine" in row:
            print(f"{metric:46} {cell('machine'):>24}")
            continue
        ratio = (f"{row['ratio_best']:.2f} / {row['ratio_median']:.2f}"
                 if "ratio_best" in row else "")
        print(f"{metric:46} {cell('hostbroker'):>24} {cell('naive'):>22} {ratio:>18}")
    if report.get("where_the_time_goes"):
        print()
        print("where the time goes in hostbroker (stage counters, per client request):")
        for phase, table in report["where_the_time_goes"].items():
            for line in format_where(phase, table):
                print(line)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default=",".join(PHASES),
                    help=f"comma-separated, of {','.join(PHASES)} (default all)")
    ap.add_argument("--target", choices=("hostbroker", "naive", "both"), default="both")
    ap.add_argument("--kind", choices=("tcp", "unix"), default="tcp",
                    help="socket of every phase but rtt (default tcp, as the naive broker's "
                         "users would)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each measurement (default 3)")
    ap.add_argument("--seconds", type=float, default=2.0,
                    help="seconds per measurement (per load in api; default 2)")
    ap.add_argument("--e2e-seconds", type=float, default=6.0, help="end-to-end run (default 6)")
    ap.add_argument("--e2e-rate", type=float, default=1000.0, help="messages/s (default 1000)")
    ap.add_argument("--clients", type=int, default=4, help="clients at full load (default 4)")
    ap.add_argument("--dd-mib", type=int, default=256,
                    help="MiB per dd / sendfile run, and the cap on each 10 KiB produce")
    ap.add_argument("--warm-mib", type=int, default=0,
                    help="before each dd and each 10 KiB produce, write this many MiB into a "
                         "scratch file and delete it, so that all of them find warm memory "
                         "(default 0: off; see warm_free_memory)")
    ap.add_argument("--wait-quiet", type=float, default=5.0,
                    help="before quiet phases wait up to this long for an idle second")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="hostbroker setting (repeatable)")
    ap.add_argument("--nice", type=int, default=None, metavar="N",
                    help="renice both brokers' processes to N after they start (below 0 needs "
                         "root): what a unit's Nice= gives; the clients keep their own")
    ap.add_argument("--rr", type=int, default=None, metavar="PRIO",
                    help="both brokers under the real-time round-robin policy at PRIO (root): "
                         "hostbroker by its setting cpu.realtime.priority, the naive one "
                         "as --nice does; run this under `chrt -r PRIO` for the clients too")
    ap.add_argument("--workdir", help="where data goes (default: a new temporary directory)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--json-out", metavar="FILE", help="also write the JSON report to FILE")
    args = ap.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        ap.error(f"--phases: unknown {', '.join(bad) or 'nothing'}; expected {','.join(PHASES)}")
    args.phase_list = phases
    if not 1 <= args.repeats <= 20 or not 0.1 <= args.seconds <= 60:
        ap.error("--repeats must be 1..20 and --seconds 0.1..60")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    def on_term(signum, frame):
        raise SystemExit(f"benchmark stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    own_workdir = args.workdir is None
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="hb-latency-")
    os.makedirs(args.workdir, exist_ok=True)
    report = {"machine": machine_info(), "repeats": args.repeats, "kind": args.kind,
              "args": {k: v for k, v in vars(args).items()}}
    hb = naive = counters = None
    targets = {}
    try:
        if args.target in ("hostbroker", "both"):
            hb = Broker(args.workdir, args.set + (
                [f"cpu.realtime.priority={args.rr}"] if args.rr else []))
            log(f"starting hostbroker serve in {args.workdir} ...")
            hb.start()
            targets["hostbroker"] = hb
            report["broker_settings"] = hb.settings
            counters = StageCounters(hb.settings)
        if args.target in ("naive", "both"):
            naive = NaiveBroker(args.workdir)
            naive.start()
            targets["naive"] = naive
        for broker in targets.values():
            create_topics(broker.uri("tcp"))
            if args.nice is not None or (args.rr and broker is naive):
                reprioritize(broker.proc.pid, args.nice, args.rr)
        run = Run(targets, counters, args)
        for phase in args.phase_list:
            PHASE_FUNCS[phase](run, args)
        report["summary"] = run.summary()
        report["where_the_time_goes"] = {
            phase: per_request(c, run.stage_requests.get(phase, 0))
            for phase, c in run.stages.items()}
        report["stage_counters"] = run.stages
        report["runs"] = run.raw
    finally:
        if counters is not None:
            counters.close()
        if hb is not None:
            report["broker_exit_code"] = hb.stop()
        if naive is not None:
            naive.stop()
        if own_workdir:
            shutil.rmtree(args.workdir, ignore_errors=True)
    output(report, args, print_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
