#!/usr/bin/env python3
"""What holding a CPU wake-up latency request is worth, to hostbroker and to the naive broker.

Run by hand (not a test), as root (``/dev/cpu_dma_latency`` is root's), from
the repository with its venv::

    .venv/bin/python tools/bench/cpu_latency_ab.py --rounds 4
    .venv/bin/python tools/bench/cpu_latency_ab.py --us 0 --loads sync,e2e --rounds 6

Starts one ``hostbroker serve`` (defaults; ``--set`` passed through) and one
``naive_broker.py`` (``latency_loads.NaiveBroker``) and runs every load on each, in
rounds. In each round the loads run twice, once with nothing held and once
while this script holds the request the broker's ``cpu.wakeup.latency.us``
setting holds (``hostbroker.cpulatency.hold``: the same open file, the same
effect on the machine), the order alternating from round to round. The
request is machine-wide, which is why the script holds it, not a broker: so
both brokers are measured with and without it, in the same run. Loads, each
bounded by ``--seconds`` (``e2e`` by ``--e2e-seconds``):

- ``rtt``: METADATA round trips on one TCP connection: p50, p99 ms.
- ``sync``: one client producing 1,000-message sets of 100 B, acks=1, one
  request at a time: messages/s.
- ``sync1``: the same with one message per request: requests/s.
- ``e2e``: end to end at 1,000 msgs/s with a long-polling consumer
  (``latency_loads.run_e2e``): p50, p99, p99.9 ms. Before it the script writes
  back every dirty page (``os.sync``): what the ``sync`` loads wrote a
  moment before would otherwise go to disk during it.

Prints every round, then per load and broker the median without and with the
request, the gain, and hostbroker against naive both ways.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from harness import Broker, log, machine_info  # noqa: E402
from latency_loads import NaiveBroker, create_topics, run_e2e, run_pipelined, run_rtt  # noqa: E402

from hostbroker import cpulatency  # noqa: E402

LOADS = ("rtt", "e2e", "sync", "sync1")
# (name, higher is better) of what each load reports
FIGURES = {"rtt": (("p50 ms", False), ("p99 ms", False)),
           "sync": (("msgs/s", True),),
           "sync1": (("requests/s", True),),
           "e2e": (("p50 ms", False), ("p99 ms", False), ("p99.9 ms", False))}


def measure(load: str, uri: str, a) -> tuple:
    if load == "rtt":
        out = run_rtt(uri, "lat-rtt", a.seconds)["latency_ms"]
        return out["p50"], out["p99"]
    if load == "e2e":
        os.sync()  # the sync loads' dirty pages written back now, not during this one
        time.sleep(0.5)
        out = run_e2e(uri, "lat-e2e", a.e2e_seconds, 1000)["latency_ms"]
        return out["p50"], out["p99"], out["p99.9"]
    batch = 1000 if load == "sync" else 1
    r = run_pipelined(uri, "lat-sync", a.seconds, 100, batch, 1)
    return (r["msgs_per_s"] if batch > 1 else round(r["requests"] / r["seconds"], 1),)


@contextlib.contextmanager
def held(us: int | None):
    """The request held for the block (``us`` None: nothing held)."""
    if us is None:
        yield
        return
    fd = cpulatency.hold(us)
    try:
        yield
    finally:
        os.close(fd)


def report(results: dict, loads: list[str]) -> None:
    """Medians, gains and ratios; ``results[(load, target, held)]`` is a list of tuples."""
    print(f"\n{'load':6} {'figure':11} {'broker':10} {'without':>12} {'with':>12} {'gain':>6}")
    for load in loads:
        for i, (figure, higher) in enumerate(FIGURES[load]):
            med = {}
            for target in ("hostbroker", "naive"):
                for h in (False, True):
                    med[target, h] = statistics.median(r[i] for r in results[load, target, h])
                gain = (med[target, True] / med[target, False] if higher
                        else med[target, False] / med[target, True])
                print(f"{load:6} {figure:11} {target:10} {med[target, False]:12.4g} "
                      f"{med[target, True]:12.4g} {gain:5.2f}x")
            for h in (False, True):
                ratio = (med["hostbroker", h] / med["naive", h] if higher
                         else med["naive", h] / med["hostbroker", h])
                print(f"{load:6} {figure:11} {'hb/naive':10} {'':>12} {'':>12} {ratio:5.2f}x "
                      f"({'with' if h else 'without'}; above 1: hostbroker better)")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="cpu_latency_ab.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--us", type=int, default=0, help="the request held, µs (default 0)")
    ap.add_argument("--loads", default=",".join(LOADS), help=f"of {','.join(LOADS)}")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--e2e-seconds", type=float, default=5.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="hostbroker setting (repeatable)")
    a = ap.parse_args(argv)
    a.loads = [x for x in a.loads.split(",") if x]
    unknown = set(a.loads) - set(LOADS)
    if unknown:
        ap.error(f"unknown loads: {', '.join(sorted(unknown))}")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    before = cpulatency.current()
    if before != cpulatency.DEFAULT_US:
        log(f"note: a request of {before} µs is already held on this machine; "
            "'without' is not without")
    workdir = tempfile.mkdtemp(prefix="hb-cpulat-")
    targets = {}
    try:
        targets["hostbroker"] = Broker(os.path.join(workdir, "hb"), a.set)
        os.makedirs(targets["hostbroker"].root)
        targets["hostbroker"].start()
        targets["naive"] = NaiveBroker(workdir)
        targets["naive"].start()
        for broker in targets.values():
            create_topics(broker.uri("tcp"))
        print(machine_info(), flush=True)
        results = {(load, t, h): [] for load in a.loads for t in targets for h in (False, True)}
        for r in range(a.rounds):
            for h in ((False, True) if r % 2 == 0 else (True, False)):
                with held(a.us if h else None):
                    for load in a.loads:
                        for name, broker in targets.items():
                            value = measure(load, broker.uri("tcp"), a)
                            results[load, name, h].append(value)
                            log(f"[{r + 1}/{a.rounds}] {'with' if h else 'without':7} "
                                f"{load:5} {name:10} {value}")
        report(results, a.loads)
    finally:
        for broker in targets.values():
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
