#!/usr/bin/env python3
"""What a METADATA request for all topics costs a broker of many partitions,
and its processor's other connections, against a baseline tree.

Run by hand (not a test), from the repository with its venv::

    git worktree add /tmp/hb-base HEAD~1     # or any tree to compare with
    .venv/bin/python tools/bench/metadata_scale.py --baseline /tmp/hb-base --rounds 3

Each round starts ``hostbroker serve`` from this tree and from the
``--baseline`` tree in turn (the broker's ``PYTHONPATH`` names the tree),
with one processor (``num.processors=1``, so that every connection shares
it; ``--set`` passed through), and creates ``--topics`` topics of
``--partitions`` partitions. Then, for ``--seconds`` each:

- one client sends METADATA requests naming no topic, one at a time: their
  round trip, which includes the client's decoding of the answer;
- this process sends METADATA requests naming one topic, one at a time,
  first alone and then while a client process sends the all-topics
  requests as above. The difference is what the processor's work on the
  big answers costs everybody else of the same processor.

It prints the percentiles of each and the broker's CPU per all-topics
request (psutil, every process; the CPU of the probe alone taken off).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

import tree_ab as ab  # noqa: E402

from hostbroker.commands import perf_latency as pl  # noqa: E402


def _time(uri: str, topics: tuple, seconds: float) -> dict:
    from hostbroker.protocol import api

    request = api.MetadataRequest(topics)
    return pl.summary(pl.time_requests(uri, lambda: request, seconds))


def _all_topics(uri: str, seconds: float, out) -> None:
    """In a spawned process: all-topics METADATA one at a time for ``seconds``."""
    out.send(_time(uri, (), seconds))
    out.close()


def one_round(tree: str, a) -> dict:
    from hostbroker.client.simple import SimpleClient

    with ab.broker_of(tree, ["num.processors=1"] + a.set, "hb-mdscale-") as broker:
        uri = broker.uri(a.socket)
        with SimpleClient(uri, timeout=60) as client:
            for i in range(a.topics):
                client.create_topic(f"scale-{i}", a.partitions)
        _time(uri, ("scale-0",), 0.3)  # the table read once
        cpu0 = ab.broker_cpu(broker.proc.pid)
        alone = _time(uri, ("scale-0",), a.seconds)
        cpu_alone = ab.broker_cpu(broker.proc.pid) - cpu0
        ctx = multiprocessing.get_context("spawn")
        receive, send = ctx.Pipe(duplex=False)
        big = ctx.Process(target=_all_topics, args=(uri, a.seconds, send))
        cpu0 = ab.broker_cpu(broker.proc.pid)
        big.start()
        beside = _time(uri, ("scale-0",), a.seconds)
        big.join(a.seconds + 120)
        everything = receive.recv() if receive.poll(5) else None
        cpu = ab.broker_cpu(broker.proc.pid) - cpu0 - cpu_alone
        n = everything["requests"] if everything else 0
        return {"alone": alone["latency_ms"], "beside": beside["latency_ms"],
                "all": everything["latency_ms"] if everything else None, "all_requests": n,
                "cpu_ms_per_all": cpu * 1000 / n if n else None}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="metadata_scale.py", description=__doc__.split("\n\n")[0])
    ab.add_arguments(ap)
    ap.add_argument("--topics", type=int, default=250)
    ap.add_argument("--partitions", type=int, default=8, help="of each topic")
    a = ap.parse_args(argv)
    ab.check_arguments(ap, a)
    if a.topics < 1 or not 1 <= a.partitions <= 10000:
        ap.error("--topics must be at least 1 and --partitions within 1-10000")
    return a


def line(res: dict) -> str:
    al, be, ev = res["alone"], res["beside"], res["all"] or {}
    return (f"all-topics METADATA p50 / p99 {ev.get('p50', 0):.1f} / {ev.get('p99', 0):.1f} ms "
            f"({res['all_requests']}), broker CPU {res['cpu_ms_per_all'] or 0:.1f} ms each; "
            f"one-topic METADATA p50 / p99 / max ms alone {al['p50']:.3f} / {al['p99']:.3f} / "
            f"{al['max']:.1f}, beside {be['p50']:.3f} / {be['p99']:.3f} / {be['max']:.1f}")


def summary(med) -> str:
    return (f"all-topics p50 {med('all', 'p50'):.1f} ms, broker CPU {med('cpu_ms_per_all'):.1f}"
            f" ms each; one-topic beside it p50 {med('beside', 'p50'):.3f} ms, p99 "
            f"{med('beside', 'p99'):.3f} ms")


def main(argv=None) -> int:
    a = parse_args(argv)
    ab.alternate(a, lambda tree: one_round(tree, a), line, summary,
                 f"{a.topics} topics x {a.partitions} partitions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
