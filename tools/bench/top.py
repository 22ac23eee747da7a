#!/usr/bin/env python3
"""What does one refresh of ``hostbroker top`` cost at many partitions?

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/top.py --topics 100 --partitions 100 --refreshes 10

Starts ``hostbroker serve`` (``--set`` passed through; ``max.partitions``
raised to hold them), creates ``--topics`` topics of ``--partitions``
partitions and produces one message set to every partition (the setup of
:mod:`metrics`, without groups), so every partition has counts. Then this
process plays ``top``: it attaches as ``top`` does
(:class:`hostbroker.top.Source`) and times its refreshes (one reading of the
broker's shared memory and psutil, then the screen drawn from it and the
previous reading), in three phases of ``--refreshes`` refreshes
``--interval`` apart:

- **quiet**: no refreshes, the broker idle: the CPU its processes use anyway;
- **idle**: refreshes, the broker idle: each refresh's wall and CPU time in
  this process (read and draw apart), and the broker's CPU against the quiet
  phase (``top`` reads shared memory: nothing but noise is expected);
- **busy**: before each refresh (outside the timing) one message set to each
  of ``--busy`` partitions spread over the topics, so the screen has rates
  to show; the last screen is kept in the report.

The machine is shared, so the report gives the median of the refreshes (and
the max).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

import harness  # noqa: E402
import metrics  # noqa: E402


def _broker_cpu(broker: harness.Broker) -> dict[str, float]:
    return harness.cpu_seconds(broker.workers())


def _since(before: dict[str, float], now: dict[str, float], scale: float = 1.0) -> dict:
    """CPU ms of each broker process between two :func:`_broker_cpu` (times ``scale``)."""
    return {k: round((v - before.get(k, 0.0)) * scale * 1000, 1) for k, v in sorted(now.items())}


def _refreshes(source, render, count: int, interval: float, between=None) -> dict:
    """``count`` refreshes ``interval`` apart (``between()`` first, untimed):
    the wall and CPU ms of each, read and draw apart, and the last screen."""
    previous = source.read()
    last = time.monotonic()
    figures = {"wall_ms": [], "cpu_ms": [], "read_ms": [], "draw_ms": []}
    text = ""
    for _ in range(count):
        time.sleep(max(0.0, last + interval - time.monotonic()))
        if between is not None:
            between()
        w0, c0 = time.perf_counter(), time.process_time()
        reading = source.read()
        w1 = time.perf_counter()
        now = time.monotonic()
        text = render(reading, previous, now - last)
        w2, c2 = time.perf_counter(), time.process_time()
        figures["wall_ms"].append((w2 - w0) * 1000)
        figures["cpu_ms"].append((c2 - c0) * 1000)
        figures["read_ms"].append((w1 - w0) * 1000)
        figures["draw_ms"].append((w2 - w1) * 1000)
        previous, last = reading, now
    out = {f"{k}_median": round(statistics.median(v), 1) for k, v in figures.items()}
    out.update({f"{k}_max": round(max(v), 1) for k, v in figures.items()})
    out["screen"] = text.split("\n")
    return out


def run(args: argparse.Namespace) -> dict:
    from hostbroker.client.simple import SimpleClient
    from hostbroker.config import Config
    from hostbroker.log.message import encode_message_set
    from hostbroker.top import Source
    from hostbroker.top_render import render

    workdir = tempfile.mkdtemp(prefix="hb-bench-top-")
    total = args.topics * args.partitions
    settings = [f"max.partitions={max(4096, 2 * total)}", *args.set]
    broker = harness.Broker(workdir, settings)
    report = {"machine": harness.machine_info(), "topics": args.topics,
              "partitions_per_topic": args.partitions, "partitions": total,
              "refreshes": args.refreshes, "interval_s": args.interval,
              "busy_partitions": args.busy, "settings": settings}
    broker.start()
    try:
        harness.log(f"creating {total} partitions")
        metrics._setup(broker, args.topics, args.partitions, 0)
        config = Config.build(overrides=[f"{k}={v}" for k, v in broker.settings.items()])
        source = Source(config)
        source.read()  # psutil primes its CPU figures; the stats regions are mapped
        seconds = args.refreshes * args.interval
        harness.wait_quiet(30)
        harness.log(f"quiet phase, {seconds:.0f} s")
        before = _broker_cpu(broker)
        time.sleep(seconds)
        quiet = _since(before, _broker_cpu(broker))
        harness.log(f"idle phase: {args.refreshes} refreshes")
        before = _broker_cpu(broker)
        t0 = time.monotonic()
        idle = _refreshes(source, render, args.refreshes, args.interval)
        time.sleep(max(0.0, t0 + seconds + args.interval - time.monotonic()))
        # (the idle phase lasts one interval more: its first reading, untimed)
        refreshing = _since(before, _broker_cpu(broker), seconds / (time.monotonic() - t0))
        harness.log(f"busy phase: {args.refreshes} refreshes, {args.busy} partitions taking data")
        step = max(1, total // max(1, args.busy))
        busy = [(f"bench-{(i * step) // args.partitions:04d}", (i * step) % args.partitions)
                for i in range(min(args.busy, total))]
        data = encode_message_set([b"m" * 100] * 10)
        with SimpleClient(broker.uri("unix"), timeout=60) as client:
            taking = _refreshes(source, render, args.refreshes, args.interval,
                                lambda: client.produce_many([(t, p, data) for t, p in busy]))
    finally:
        broker.stop()
    report.update({
        "idle": idle, "busy": taking,
        "broker_cpu_ms_quiet": round(sum(quiet.values()), 1),
        "broker_cpu_ms_refreshing": round(sum(refreshing.values()), 1),
        "per_process_cpu_ms_quiet": quiet, "per_process_cpu_ms_refreshing": refreshing,
    })
    return report


def print_report(r: dict) -> None:
    print(f"{r['partitions']} partitions ({r['topics']} x {r['partitions_per_topic']}), "
          f"{r['refreshes']} refreshes {r['interval_s']:g} s apart per phase")
    for phase in ("idle", "busy"):
        f = r[phase]
        print(f"{phase:5} refresh: wall {f['wall_ms_median']:7.1f} ms median "
              f"({f['wall_ms_max']:.1f} max), CPU {f['cpu_ms_median']:7.1f} ms median "
              f"({f['cpu_ms_max']:.1f} max); read {f['read_ms_median']:.1f} ms, "
              f"draw {f['draw_ms_median']:.1f} ms")
    print(f"broker CPU: {r['broker_cpu_ms_refreshing']:.1f} ms refreshing, "
          f"{r['broker_cpu_ms_quiet']:.1f} ms quiet (same length)")
    for name, ms in r["per_process_cpu_ms_refreshing"].items():
        if ms or r["per_process_cpu_ms_quiet"].get(name):
            print(f"  {name:16} {ms:8.1f} ms refreshing, "
                  f"{r['per_process_cpu_ms_quiet'].get(name, 0.0):.1f} ms quiet")
    print(f"the last busy screen ({len(r['busy']['screen'])} lines):")
    print("\n".join(r["busy"]["screen"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100, help="per topic")
    parser.add_argument("--refreshes", type=int, default=10, help="per phase")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    parser.add_argument("--busy", type=int, default=20,
                        help="partitions taking data in the busy phase")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    harness.output(run(args), args, print_report)


if __name__ == "__main__":
    main()
