#!/usr/bin/env python3
"""What is one setting worth? Two brokers that differ in it, measured alternately.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/ab_settings.py rtt --rounds 4 \\
        --a processor.local.requests=true --b processor.local.requests=false
    .venv/bin/python tools/bench/ab_settings.py sync --rounds 6 --b produce.direct.answers=false

Starts two ``hostbroker serve`` (``harness.Broker``: free ports,
temporary data, stopped by PID), one with the ``--a`` settings and one with
``--b``, each with one topic of one partition, and runs the same load on
each in turn, A, B, A, B ..., ``--rounds`` times, over TCP (``--socket
unix``: the Unix socket). Loads (every one bounded by ``--seconds``):

- ``rtt``: METADATA round trips on one connection: p50, p99, p99.9 in ms.
- ``sync``: one client producing 1,000-message sets of 100 B, acks=1, one
  request at a time: messages/s.
- ``sync1``: the same with one message per request: requests/s.
- ``pipe``: 1,000-message sets with 16 in flight: messages/s.
- ``e2e``: end to end at 1,000 msgs/s with a long-polling consumer
  (``latency_loads.run_e2e``): p50, p99, p99.9 in ms.
- ``e2e-parts``: the same over a topic of ``--partitions`` partitions
  (default 8), message i to partition i % N, the consumer fetching all N
  in each FETCH. ``--pair-every N`` has the producer of either send every
  Nth PRODUCE together with the next one (a client that pipelines now and
  then).
- ``fetch-parts``: round trips of one client's FETCH of all N partitions of
  that topic (``--fill`` 100-byte messages each, default 1, from offset 0,
  max_wait_ms 0): p50, p99, p99.9 in ms.
- ``large``: one client producing 100-message sets of 10 KiB (~1 MiB
  requests), 4 in flight, acks=1, up to 512 MiB per round, into a topic
  created for the round and deleted after it (so the page cache's dirty
  pages do not pile up from round to round): MB/s.
- ``sync10k``: the same, one request at a time: MB/s.
- ``fetch``: reading back 256 MiB of 10 KiB messages (produced once, before
  the first round) in 4 MiB fetches, 4 in flight, bytes not parsed: MB/s.
- ``commit``: OFFSET_COMMITs of one partition (a group per client
  process), one at a time: commits/s.
- ``offset-fetch``: OFFSET_FETCH round trips of one partition on one
  connection: p50, p99, p99.9 in ms.
- ``heartbeat``: HEARTBEAT round trips of a member that joined first (and
  leaves after) on one connection: p50, p99, p99.9 in ms.

``--batch`` changes the messages per set of ``large`` and ``sync10k``.
``--clients N`` runs ``sync``, ``sync1``, ``pipe`` and ``commit`` from N client
processes side by side (started together), each on a connection of its
own to the one partition: the sum of their rates.

``--a-tree TREE`` starts A's broker from another source tree (a clone or
worktree of hostbroker, e.g. the commit before a change): a same-run A/B of
code rather than of settings. The loads' client code is this tree's either
way.

Prints every round and the median (and best) of each side. Alternating in
one run is what makes the two comparable on a shared machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from harness import Broker  # noqa: E402
from latency_loads import run_e2e, run_fetch, run_pipelined  # noqa: E402
from tree_ab import is_source_tree, start_from  # noqa: E402

LOADS = ("rtt", "sync", "sync1", "pipe", "e2e", "e2e-parts", "fetch-parts", "large", "sync10k",
         "fetch", "commit", "offset-fetch", "heartbeat")
LATENCY_LOADS = ("rtt", "e2e", "e2e-parts", "fetch-parts", "offset-fetch", "heartbeat")
FETCH_BYTES = 256 * 1024 * 1024
LARGE_BYTES = 512 * 1024 * 1024
TOPIC = "ab"
PARTS_TOPIC = "ab-parts"  # of --partitions partitions


def percentiles_ms(latencies_ns: list[int]) -> tuple[float, float, float]:
    """(p50, p99, p99.9) in ms, nearest rank (as ``hostbroker perf``), of a
    non-empty list of ns."""
    from hostbroker.commands.perf import PERCENTILES, percentile

    values = sorted(latencies_ns)
    return tuple(round(percentile(values, p) / 1e6, 4) for p in PERCENTILES)


def summarize(rounds: list) -> dict:
    """Median (and best, for rates) of one side's rounds: a list of numbers
    (rates, higher is better) or of (p50, p99, p99.9) tuples (lower is better)."""
    if isinstance(rounds[0], tuple):
        return {"median": tuple(round(statistics.median(r[k] for r in rounds), 4)
                                for k in range(3)),
                "best": tuple(min(r[k] for r in rounds) for k in range(3))}
    return {"median": round(statistics.median(rounds), 1), "best": max(rounds)}


def run_rtt(uri: str, seconds: float) -> tuple[float, float, float]:
    from hostbroker.client.simple import SimpleClient

    latencies = []
    with SimpleClient(uri) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.perf_counter_ns()
            client.metadata([TOPIC])
            latencies.append(time.perf_counter_ns() - start)
    return percentiles_ms(latencies)


def run_fetch_parts(uri: str, partitions: int, seconds: float) -> tuple[float, float, float]:
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.protocol import api

    request = api.FetchRequest(0, 1, tuple(api.FetchPartition(PARTS_TOPIC, p, 0, 1 << 20)
                                           for p in range(partitions)))
    latencies = []
    with BrokerConnection(uri, timeout=30).connect() as conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.perf_counter_ns()
            answer = conn.request(request)
            latencies.append(time.perf_counter_ns() - start)
            if any(p.error_code or not p.message_set for p in answer.partitions):
                raise SystemExit(f"fetch-parts: an empty or failed partition in {answer}")
    return percentiles_ms(latencies)


def run_commit(uri: str, seconds: float) -> float:
    """OFFSET_COMMITs of one partition, one at a time on one connection: commits/s."""
    from hostbroker.client.connection import BrokerConnection
    from hostbroker.protocol import api

    request = api.OffsetCommitRequest(f"ab-{os.getpid()}", (
        api.OffsetCommitPartition(TOPIC, 0, 1, ""),))
    done = 0
    with BrokerConnection(uri, timeout=30).connect() as conn:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            if conn.request(request).partitions[0].error_code:
                raise SystemExit("commit: answered with an error code")
            done += 1
        return round(done / (time.monotonic() - start), 1)


def run_group_rtt(uri: str, load: str, seconds: float) -> tuple[float, float, float]:
    """OFFSET_FETCHes of one partition, or HEARTBEATs of a member that joined
    first (and leaves after), one at a time on one connection."""
    from hostbroker.client.coordinator_requests import (
        CoordinatorClient,
        GroupConnection,
    )
    from hostbroker.protocol import api
    from hostbroker.protocol import groups as gp

    group = f"ab-{os.getpid()}"
    client = CoordinatorClient([uri], timeout=30, client_id="ab")
    try:
        joined = None
        if load == "heartbeat":
            joined = client.join_group(group, "", {TOPIC: 1}, session_timeout_ms=10000,
                                       rebalance_timeout_ms=10000)
            if joined.error_code:
                raise SystemExit(f"heartbeat: the join was answered {joined.error_code}")
            request = gp.HeartbeatRequest(group, joined.generation, joined.member_id)
        else:
            request = api.OffsetFetchRequest(group, (api.OffsetFetchPartition(TOPIC, 0),))
        latencies = []
        with GroupConnection(uri, timeout=30, client_id="ab").connect() as conn:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                start = time.perf_counter_ns()
                answer = conn.request(request)
                latencies.append(time.perf_counter_ns() - start)
                code = answer.error_code if joined else answer.partitions[0].error_code
                if code:
                    raise SystemExit(f"{load}: answered with error code {code}")
        if joined:
            client.leave_group(group, joined.member_id)
        return percentiles_ms(latencies)
    finally:
        client.close()


def measure(load: str, uri: str, seconds: float, batch: int = 100, partitions: int = 8,
            pair_every: int = 0):
    if load == "rtt":
        return run_rtt(uri, seconds)
    if load == "e2e":
        out = run_e2e(uri, TOPIC, seconds, 1000, pair_every=pair_every)["latency_ms"]
        return out["p50"], out["p99"], out["p99.9"]
    if load == "e2e-parts":
        out = run_e2e(uri, PARTS_TOPIC, seconds, 1000, partitions=partitions,
                      pair_every=pair_every)["latency_ms"]
        return out["p50"], out["p99"], out["p99.9"]
    if load == "fetch-parts":
        return run_fetch_parts(uri, partitions, seconds)
    if load == "fetch":
        return run_fetch(uri, TOPIC, 0, FETCH_BYTES, seconds)["mb_per_s"]
    if load == "commit":
        return run_commit(uri, seconds)
    if load in ("offset-fetch", "heartbeat"):
        return run_group_rtt(uri, load, seconds)
    if load in ("large", "sync10k"):
        from hostbroker.client.simple import SimpleClient

        topic = f"{TOPIC}-large"
        with SimpleClient(uri) as client:
            client.create_topic(topic, 1)
            try:
                return run_pipelined(uri, topic, seconds, 10 * 1024, batch,
                                     4 if load == "large" else 1, LARGE_BYTES)["mb_per_s"]
            finally:
                client.delete_topic(topic)
                time.sleep(1)  # its files go in the background
    batch, window = {"sync": (1000, 1), "sync1": (1, 1), "pipe": (1000, 16)}[load]
    result = run_pipelined(uri, TOPIC, seconds, 100, batch, window)
    return result["msgs_per_s"] if batch > 1 else result["requests"] / result["seconds"]


def _client(job: tuple) -> float:
    """In a client process: wait for the common start, then run the load."""
    load, uri, seconds, start_at = job
    delay = start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    return measure(load, uri, seconds)


def measure_clients(load: str, uri: str, seconds: float, clients: int) -> float:
    """``load`` (a rate) from ``clients`` spawned processes at once: the sum."""
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        start_at = time.monotonic() + 2.0  # after the processes have imported
        return round(sum(pool.map(_client, [(load, uri, seconds, start_at)] * clients)), 1)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="ab_settings.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("load", choices=LOADS)
    ap.add_argument("--a", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of broker A (repeatable; none: the defaults)")
    ap.add_argument("--b", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of broker B (repeatable)")
    ap.add_argument("--a-tree", metavar="TREE",
                    help="start A's broker from this source tree (default: this one)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of A then B (default 4)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    ap.add_argument("--batch", type=int, default=100,
                    help="10 KiB messages per set in large and sync10k (default 100)")
    ap.add_argument("--socket", choices=("tcp", "unix"), default="tcp",
                    help="the clients' socket kind (default tcp)")
    ap.add_argument("--partitions", type=int, default=8,
                    help="partitions of the topic e2e-parts and fetch-parts use (default 8)")
    ap.add_argument("--fill", type=int, default=1,
                    help="100-byte messages in each partition for fetch-parts (default 1)")
    ap.add_argument("--pair-every", type=int, default=0, metavar="N",
                    help="e2e and e2e-parts: every Nth PRODUCE is sent together with the next "
                         "one, before either answer is read (default 0: never)")
    ap.add_argument("--clients", type=int, default=1,
                    help="client processes side by side, for sync, sync1, pipe and commit "
                         "(default 1)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0 or not 1 <= args.batch <= 1000:
        ap.error("--rounds must be at least 1, --seconds above 0, --batch 1 to 1000")
    if not 1 <= args.partitions <= 1000 or not 1 <= args.fill <= 10000:
        ap.error("--partitions must be 1 to 1000, --fill 1 to 10000")
    if args.pair_every < 0 or (args.pair_every and args.load not in ("e2e", "e2e-parts")):
        ap.error("--pair-every must be 0 or more, and above 0 only for e2e and e2e-parts")
    if not 1 <= args.clients <= 64 or (args.clients > 1
                                       and args.load not in ("sync", "sync1", "pipe", "commit")):
        ap.error("--clients 1 to 64, and above 1 only for sync, sync1, pipe and commit")
    if args.a_tree is not None:
        args.a_tree = os.path.abspath(args.a_tree)
        if not is_source_tree(args.a_tree):
            ap.error(f"--a-tree {args.a_tree}: no hostbroker package there")
    return args


def main(argv=None) -> int:
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set

    args = parse_args(argv)
    sides = {"A": args.a, "B": args.b}
    brokers, dirs = {}, []
    try:
        for name, settings in sides.items():
            workdir = tempfile.mkdtemp(prefix=f"hb-ab-{name}-")
            dirs.append(workdir)
            broker = Broker(workdir, settings)
            if name == "A" and args.a_tree is not None:
                start_from(broker, args.a_tree)
            else:
                broker.start()
            brokers[name] = broker
            with SimpleClient(broker.uri("tcp")) as client:
                client.create_topic(TOPIC, 1)
                if args.load in ("e2e-parts", "fetch-parts"):
                    client.create_topic(PARTS_TOPIC, args.partitions)
                if args.load == "fetch-parts":  # --fill messages in each
                    for p in range(args.partitions):
                        client.produce(PARTS_TOPIC, p,
                                       encode_message_set([b"x" * 100] * args.fill))
            if args.load == "fetch":  # something to read, the same on both
                run_pipelined(broker.uri("tcp"), TOPIC, 120, 10 * 1024, 100, 4, FETCH_BYTES)
        rounds = {name: [] for name in sides}
        for r in range(args.rounds):
            for name, broker in brokers.items():
                if args.clients > 1:
                    value = measure_clients(args.load, broker.uri(args.socket), args.seconds,
                                            args.clients)
                else:
                    value = measure(args.load, broker.uri(args.socket), args.seconds, args.batch,
                                    args.partitions, args.pair_every)
                rounds[name].append(value)
                print(f"[{r + 1}/{args.rounds}] {name} {value}", flush=True)
        unit = "p50, p99, p99.9 ms" if args.load in LATENCY_LOADS else "per s"
        for name, settings in sides.items():
            s = summarize(rounds[name])
            tree = f", {args.a_tree}" if name == "A" and args.a_tree else ""
            print(f"{name} ({', '.join(settings) or 'defaults'}{tree}): median {s['median']}, "
                  f"best {s['best']} ({unit})")
    finally:
        for broker in brokers.values():
            broker.stop()
        for workdir in dirs:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
