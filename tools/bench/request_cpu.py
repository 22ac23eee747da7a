#!/usr/bin/env python3
"""What one produce request costs each process, one at a time against pipelined.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/request_cpu.py
    sudo .venv/bin/python tools/bench/request_cpu.py --cpu-latency 0
    sudo .venv/bin/python tools/bench/request_cpu.py --perf-sched /tmp/sched.data --loads sync

Starts one ``hostbroker serve`` (defaults; ``--set`` passed through) with a
topic of one partition and runs, for ``--seconds`` each, one client producing
over the Unix socket (acks=1): ``sync1`` one message per request, one at a
time; ``pipe1`` the same with 16 in flight; ``sync`` 1,000-message sets of 100
B one at a time; ``pipe`` the same 16 in flight. For each it prints requests
per second and the CPU every process spent per request: the broker's
processes by name, from ``/proc/PID/task/*/schedstat`` (every thread, ns of
CPU), and the client's from its own ``process_time``. One at a time every
process in the chain sleeps between requests, so the difference between a
load and its pipelined twin is what the wake-ups cost.

``--cpu-latency US`` holds a CPU wake-up latency request of ``US`` µs
(``hostbroker.cpulatency``, what the broker's ``cpu.wakeup.latency.us``
holds) for the whole run. ``--perf-sched FILE`` records the scheduler
(``perf sched record -a``) during the loads named by ``--loads``; read it
with ``perf sched timehist -i FILE -w --state`` (who woke whom, how long
each waited for a CPU, how long it ran) or ``perf sched latency -i FILE``.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from broker_throughput import Broker, machine_info  # noqa: E402
from latency import run_pipelined  # noqa: E402

from hostbroker import cpulatency  # noqa: E402

LOADS = {"sync1": (1, 1), "pipe1": (1, 16), "sync": (1000, 1), "pipe": (1000, 16)}


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, ns (0 once it is gone)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def workers(broker: Broker) -> dict[str, int]:
    """Process name (hb-writer-0, ...) -> pid of each of the broker's workers."""
    import psutil

    return {p.name(): p.pid for p in psutil.Process(broker.proc.pid).children()}


def measure(broker: Broker, load: str, seconds: float) -> dict:
    batch, window = LOADS[load]
    uri = broker.uri("unix")
    run_pipelined(uri, "cpu", 0.5, 100, batch, window)  # warm
    procs = workers(broker)
    before = {name: cpu_ns(pid) for name, pid in procs.items()}
    mine = time.process_time()
    result = run_pipelined(uri, "cpu", seconds, 100, batch, window)
    mine = time.process_time() - mine
    n = result["requests"]
    spent = {name: (cpu_ns(pid) - before[name]) / 1000 / n for name, pid in procs.items()}
    spent = {name: round(us, 1) for name, us in sorted(spent.items()) if us >= 0.5}
    spent["client"] = round(mine * 1e6 / n, 1)
    return {"requests_per_s": round(n / result["seconds"], 1),
            "msgs_per_s": result["msgs_per_s"], "cpu_us_per_request": spent}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="request_cpu.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default=",".join(LOADS), help=f"of {','.join(LOADS)}")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--cpu-latency", type=int, default=None, metavar="US",
                    help="hold a CPU wake-up latency request for the run (root)")
    ap.add_argument("--perf-sched", metavar="FILE", help="record the scheduler into FILE")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    a.loads = [x for x in a.loads.split(",") if x]
    if set(a.loads) - set(LOADS):
        ap.error(f"unknown loads: {', '.join(sorted(set(a.loads) - set(LOADS)))}")
    return a


def main(argv=None) -> int:
    from hostbroker.client.simple import SimpleClient

    a = parse_args(argv)
    held = cpulatency.hold(a.cpu_latency) if a.cpu_latency is not None else None
    workdir = tempfile.mkdtemp(prefix="hb-reqcpu-")
    broker = Broker(workdir, a.set)
    perf = None
    try:
        broker.start()
        with SimpleClient(broker.uri("unix")) as client:
            client.create_topic("cpu", 1)
        print(machine_info(), f"CPU wake-up latency target {cpulatency.current()} µs"
              if os.geteuid() == 0 else "", flush=True)
        if a.perf_sched:
            perf = subprocess.Popen(["perf", "sched", "record", "-a", "-o", a.perf_sched],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        for load in a.loads:
            r = measure(broker, load, a.seconds)
            cpu = "  ".join(f"{k} {v}" for k, v in r["cpu_us_per_request"].items())
            print(f"{load:6} {r['requests_per_s']:>10,.0f} requests/s "
                  f"{r['msgs_per_s']:>12,.0f} msgs/s   CPU µs per request: {cpu}", flush=True)
    finally:
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if held is not None:
            os.close(held)
    return 0


if __name__ == "__main__":
    sys.exit(main())
