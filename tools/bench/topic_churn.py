#!/usr/bin/env python3
"""What creating and deleting topics costs everyone else, against a baseline tree.

Run by hand (not a test), from the repository with its venv::

    git worktree add /tmp/hb-base HEAD~1     # or any tree to compare with
    .venv/bin/python tools/bench/topic_churn.py --baseline /tmp/hb-base --rounds 3

Each round starts ``hostbroker serve`` (defaults, so a partition table of
``max.partitions`` = 65,536 slots; ``--set`` passed through) from this tree
and from the ``--baseline`` tree in turn (the broker's ``PYTHONPATH`` names
the tree). On each, this process first sends METADATA requests one at a
time for ``--seconds`` and times them; then it does so again while one
client process creates a topic of one partition and deletes it again, over
and over (``--rate`` paces it: at equal rates the percentiles compare what
each change costs). It prints create-and-delete pairs per second, the
METADATA percentiles without and with the churn, and the CPU the whole
broker spent per pair (psutil, every process; the CPU of the phase without
churn taken off, so that the METADATA loop's own share does not count). Every worker looks at the
partition table again after each change, and a handler holds the admin
lock while it creates or deletes, so what that costs shows in all three.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

import tree_ab as ab  # noqa: E402

from hostbroker.commands import perf_latency as pl  # noqa: E402


def _churn(uri: str, seconds: float, rate: float, out) -> None:
    """In a spawned process: create and delete one topic until ``seconds`` pass,
    ``rate`` times a second (0: as often as the broker lets it)."""
    from hostbroker.client.simple import SimpleClient

    pairs = 0
    start = time.monotonic()
    end = start + seconds
    with SimpleClient(uri, timeout=30) as client:
        while time.monotonic() < end:
            name = f"churn-{pairs}"
            client.create_topic(name, 1)
            client.delete_topic(name)
            pairs += 1
            if rate:
                time.sleep(max(0.0, start + pairs / rate - time.monotonic()))
    out.send(pairs)
    out.close()


def probe(uri: str, seconds: float) -> dict:
    from hostbroker.protocol import api

    request = api.MetadataRequest(("probe",))
    return pl.summary(pl.time_requests(uri, lambda: request, seconds))["latency_ms"]


def one_round(tree: str, a) -> dict:
    from hostbroker.client.simple import SimpleClient

    with ab.broker_of(tree, a.set, "hb-churn-") as broker:
        uri = broker.uri(a.socket)
        with SimpleClient(uri) as client:
            client.create_topic("probe", 1)
        cpu0 = ab.broker_cpu(broker.proc.pid)
        quiet = probe(uri, a.seconds)
        cpu_quiet = ab.broker_cpu(broker.proc.pid) - cpu0
        ctx = multiprocessing.get_context("spawn")
        receive, send = ctx.Pipe(duplex=False)
        churner = ctx.Process(target=_churn, args=(uri, a.seconds, a.rate, send))
        cpu0 = ab.broker_cpu(broker.proc.pid)
        churner.start()
        busy = probe(uri, a.seconds)
        churner.join(a.seconds + 60)
        pairs = receive.recv() if receive.poll(5) else 0
        # what the churn added: the METADATA loop's own share is the quiet phase's
        cpu = ab.broker_cpu(broker.proc.pid) - cpu0 - cpu_quiet
        return {"pairs_per_s": pairs / a.seconds, "quiet": quiet, "churn": busy,
                "cpu_ms_per_pair": cpu * 1000 / pairs if pairs else None}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="topic_churn.py", description=__doc__.split("\n\n")[0])
    ab.add_arguments(ap)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="create-and-delete pairs a second (default 0: as many as it can); "
                         "equal rates compare what each change costs the METADATA loop")
    a = ap.parse_args(argv)
    ab.check_arguments(ap, a)
    if a.rate < 0:
        ap.error("--rate must be at least 0")
    return a


def line(res: dict) -> str:
    q, c = res["quiet"], res["churn"]
    return (f"{res['pairs_per_s']:7.1f} create+delete/s, broker CPU "
            f"{res['cpu_ms_per_pair'] or 0:6.1f} ms each; METADATA p50 / p99 / p99.9 / max ms "
            f"quiet {q['p50']:.3f} / {q['p99']:.3f} / {q['p99.9']:.2f} / {q['max']:.1f}, during "
            f"churn {c['p50']:.3f} / {c['p99']:.3f} / {c['p99.9']:.2f} / {c['max']:.1f}")


def summary(med) -> str:
    return (f"{med('pairs_per_s'):.1f} create+delete/s, broker CPU {med('cpu_ms_per_pair'):.1f}"
            f" ms each, METADATA during churn p99 {med('churn', 'p99'):.3f} ms, p99.9 "
            f"{med('churn', 'p99.9'):.2f} ms, max {med('churn', 'max'):.1f} ms")


def main(argv=None) -> int:
    a = parse_args(argv)
    ab.alternate(a, lambda tree: one_round(tree, a), line, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
