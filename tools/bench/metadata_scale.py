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

With ``--producing K``, another client produces one message a request
(``--produce-rate`` a second) to each partition of the first K topics in
turn, from before the first phase to after the last, so that their log
ends move as they would under load.

It prints the percentiles of each and the broker's CPU per all-topics
request (psutil, every process), from two more phases: one of nothing but
the producer, and one of the all-topics client alone, less the first (the
producer's share scaled by its requests answered in each).

The clients run this tree's code against both brokers.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import sys
import time

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


def _produce(uri: str, topics: int, partitions: int, rate: float, stop, out) -> None:
    """In a spawned process: one 100 B message a request, at ``rate`` requests
    a second, to each partition of the first ``topics`` topics in turn, until
    ``stop`` is set; sends back when each was answered (``time.monotonic``)."""
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol import api

    data = encode_message_set([bytes(100)])
    requests = itertools.cycle([
        api.ProduceRequest(1, 10_000, (api.ProducePartition(f"scale-{t}", p, data),))
        for t in range(topics) for p in range(partitions)])
    answered = []
    with BrokerConnection(uri, timeout=60).connect() as conn:
        slot = time.monotonic()
        while not stop.is_set():
            slot += 1 / rate
            time.sleep(max(0.0, slot - time.monotonic()))
            conn.send(next(requests))
            conn.receive()
            answered.append(time.monotonic())
    out.send(answered)
    out.close()


def one_round(tree: str, a) -> dict:
    """The phases, each ``a.seconds``, a producer throughout if asked: the
    one-topic probe alone, then beside the all-topics client; then, for the
    broker's CPU, nothing but the producer, and the all-topics client alone.
    The producer's own CPU in the last is taken off pro rata of its requests
    answered in the two (a starved producer sends fewer)."""
    from hostbroker.client.simple import SimpleClient

    with ab.broker_of(tree, ["num.processors=1"] + a.set, "hb-mdscale-") as broker:
        uri = broker.uri(a.socket)
        with SimpleClient(uri, timeout=60) as client:
            for i in range(a.topics):
                client.create_topic(f"scale-{i}", a.partitions)
        _time(uri, ("scale-0",), 0.3)  # the table read once
        ctx = multiprocessing.get_context("spawn")
        producer = None
        if a.producing:
            produced, send = ctx.Pipe(duplex=False)
            stop = ctx.Event()
            producer = ctx.Process(target=_produce, args=(
                uri, a.producing, a.partitions, a.produce_rate, stop, send))
            producer.start()
            time.sleep(2)  # the producer under way
        alone = _time(uri, ("scale-0",), a.seconds)

        def all_topics():
            receive, send = ctx.Pipe(duplex=False)
            big = ctx.Process(target=_all_topics, args=(uri, a.seconds, send))
            big.start()
            return big, receive

        big, receive = all_topics()
        beside = _time(uri, ("scale-0",), a.seconds)
        big.join(a.seconds + 120)
        everything = receive.recv() if receive.poll(5) else None
        t0, cpu0 = time.monotonic(), ab.broker_cpu(broker.proc.pid)
        time.sleep(a.seconds)
        t1, cpu1 = time.monotonic(), ab.broker_cpu(broker.proc.pid)
        big, receive = all_topics()
        big.join(a.seconds + 120)
        t2, cpu2 = time.monotonic(), ab.broker_cpu(broker.proc.pid)
        measured = receive.recv() if receive.poll(5) else None
        idle, busy = cpu1 - cpu0, cpu2 - cpu1
        if producer is not None:
            stop.set()
            times = produced.recv() if produced.poll(30) else []
            producer.join(30)
            idle_n = sum(t0 <= t < t1 for t in times)
            busy_n = sum(t1 <= t < t2 for t in times)
            idle = idle * busy_n / idle_n if idle_n else idle
        else:
            idle = idle * (t2 - t1) / (t1 - t0)
        n = measured["requests"] if measured else 0
        return {"alone": alone["latency_ms"], "beside": beside["latency_ms"],
                "all": everything["latency_ms"] if everything else None,
                "all_requests": everything["requests"] if everything else 0,
                "cpu_ms_per_all": (busy - idle) * 1000 / n if n else None}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="metadata_scale.py", description=__doc__.split("\n\n")[0])
    ab.add_arguments(ap)
    ap.add_argument("--topics", type=int, default=250)
    ap.add_argument("--partitions", type=int, default=8, help="of each topic")
    ap.add_argument("--producing", type=int, default=0, metavar="TOPICS",
                    help="a client produces to the partitions of this many topics in turn "
                         "throughout (default none)")
    ap.add_argument("--produce-rate", type=float, default=1000.0, metavar="N",
                    help="its requests a second, one message each (default 1000)")
    a = ap.parse_args(argv)
    ab.check_arguments(ap, a)
    if a.topics < 1 or not 1 <= a.partitions <= 10000:
        ap.error("--topics must be at least 1 and --partitions within 1-10000")
    if not 0 <= a.producing <= a.topics or a.produce_rate <= 0:
        ap.error("--producing must be within 0-topics and --produce-rate above 0")
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
