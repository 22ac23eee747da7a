#!/usr/bin/env python3
"""The long run of the hostile-client fuzz (docs/fuzzing.md).

Starts ``hostbroker serve`` in a scratch directory (as the standing suite
does), then ``--jobs`` client processes send seeded batches of hostile
requests over TCP and the Unix socket until ``--seconds`` or ``--cases``
inputs (one input: one request frame sent in full): long-lived connections
pipelining pool frames and their decodable mutations, and new connections
for frames that end them (tests/hostile/stream.py). Every ``--check-every``
inputs, with the clients idle, every invariant of tests/hostile is checked:
no worker replaced, the broker tree's memory (PSS) within its bound, a normal client
answered within 2 s, no acknowledged message or commit lost; and at the end
again after a restart. The generators, the checks of each answer and the
invariants are the suite's own (tests/hostile/).

    .venv/bin/python tools/fuzz_broker.py --seconds 600 --cases 5000000 --jobs 2
    .venv/bin/python tools/fuzz_broker.py --seed 7 --replay 1234   # one batch again

Prints a summary (inputs, batches, connections, rates, memory, violations
each with the seed and batch that reproduce it) and exits 1 on any
violation, 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.hostile import fuzzlib, stream  # noqa: E402
from tests.hostile.fuzzlib import FUZZ_BROKER_SETTINGS, Violation  # noqa: E402
from tests.hostile.runner import Failure, Session, Stats  # noqa: E402
from tests.integration.broker import Broker  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int,
                   default=int(os.environ.get("HB_FUZZ_SEED", fuzzlib.DEFAULT_SEED)))
    p.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
    p.add_argument("--cases", type=int, default=10_000_000, help="stop after this many inputs")
    p.add_argument("--first-batch", type=int, default=0, help="batch index to start at")
    p.add_argument("--check-every", type=int, default=100_000,
                   help="inputs (all jobs together) between invariant checks")
    p.add_argument("--jobs", type=int, default=2, help="client processes, each sending its "
                   "own batches (first-batch + job + k * jobs)")
    p.add_argument("--connections", type=int, default=4,
                   help="connections each job keeps busy at once")
    p.add_argument("--heavy", type=float, default=0.002,
                   help="chance that a stream input is a heavy pool frame (thousands of "
                   "entries or over 64 KiB)")
    p.add_argument("--framing", type=float, default=0.3,
                   help="chance that a batch is a framing batch (new connection, 1-5 mostly "
                   "damaged frames) rather than a stream")
    p.add_argument("--lockstep", type=float, default=0.2,
                   help="chance that a stream batch waits for each answer before its next "
                   "request (what a processor answers itself or sends straight to a writer)")
    p.add_argument("--bursts", type=float, default=0.5,
                   help="chance that a lockstep batch sends 2-4 requests at once every 5-60 "
                   "(a connection that pipelines now and then)")
    p.add_argument("--replay", type=int, default=None, metavar="BATCH",
                   help="send only this batch of --seed, show its outcome")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return p.parse_args(argv)


def _kind(message: str) -> str:
    """A violation's class: its message without the numbers that differ per batch."""
    text = message.split(": ", 1)[-1]
    return re.sub(r"-?\d+", "N", re.sub(r"b'.*?'|\(.*?\)", "(..)", text))[:160]


def summary(args: argparse.Namespace, stats: Stats, session: Session, start_memory: int) -> str:
    seconds = max(stats.seconds, 1e-9)
    names = {int(k): k.name for k in fuzzlib.GENERATORS}
    by_api = ", ".join(f"{names.get(k, f'key {k}')} {n:,}"
                       for k, n in sorted(stats.by_api.items(), key=lambda kv: -kv[1])[:16])
    lines = [
        f"seed {args.seed}, jobs {args.jobs}, connections {args.connections}, heavy {args.heavy}, framing {args.framing}, "
        f"lockstep {args.lockstep}, bursts {args.bursts}",
        f"inputs {stats.requests:,} in {stats.batches:,} batches on {stats.connections:,} "
        f"connections over {seconds:.0f} s: {stats.requests / seconds:,.0f} inputs/s",
        f"answered {stats.answered:,}, refused with an error frame {stats.error_frames:,}, "
        f"invariant checks {stats.checks:,}",
        f"by api: {by_api}",
    ]
    if session.tree is not None:
        lines.append(f"broker tree PSS: start {start_memory / 2**20:.0f} MiB, "
                     f"peak {session.tree.peak / 2**20:.0f} MiB, "
                     f"bound {session.tree.bound / 2**20:.0f} MiB")
    lines.append(f"violations: {len(stats.failures)}")
    kinds: dict[str, list[Failure]] = {}
    for failure in stats.failures:
        kinds.setdefault(_kind(failure.message), []).append(failure)
    for kind, failures in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(failures):,} x {kind}")
        for failure in failures[:5]:
            again = (f"tools/fuzz_broker.py --seed {failure.seed} --replay {failure.batch}"
                     if failure.batch >= 0 else "a periodic check")
            lines.append(f"    [{again}] {failure.message[:400]}")
    return "\n".join(lines)


def replay(args: argparse.Namespace, session: Session, batch: int) -> int:
    batches = stream.Batches(session.seed, session.ctx,
                             stream.Pool.build(session.seed, session.ctx), session.uris,
                             args.heavy, args.framing, args.lockstep, args.bursts)
    tally = stream.Tally()
    try:
        for _, message, _ in batches.run([batch], tally, concurrency=1):
            raise Violation(message)
        print(f"batch {batch}: {tally.requests} inputs on {tally.connections} connection(s), "
              f"{tally.answered} answered, {tally.error_frames} error frames")
        session.check()
    except Violation as exc:
        print(f"VIOLATION: {exc}")
        return 1
    print("batch answered as it should; invariants hold")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = tempfile.mkdtemp(prefix="hb-fuzz-")
    broker = Broker(root)
    broker.settings.update(FUZZ_BROKER_SETTINGS)
    print(f"fuzz_broker: seed {args.seed}, scratch {root}", flush=True)
    try:
        broker.start()
        session = Session(broker, args.seed)
        session.setup()
        if args.replay is not None:
            return replay(args, session, args.replay)

        def progress(stats: Stats) -> None:
            peak = session.tree.peak / 2**20 if session.tree is not None else 0
            print(f"  {stats.seconds:7.0f} s  {stats.requests:>12,} inputs  "
                  f"{stats.requests / max(stats.seconds, 1e-9):>8,.0f}/s  "
                  f"peak PSS {peak:.0f} MiB  violations {len(stats.failures)}", flush=True)

        start_memory = session.tree.baseline
        stats = session.run_streams(seconds=args.seconds, max_requests=args.cases,
                                    check_every=args.check_every, jobs=args.jobs,
                                    connections=args.connections,
                                    first=args.first_batch, heavy=args.heavy,
                                    framing=args.framing, lockstep=args.lockstep,
                                    bursts=args.bursts,
                                    keep_going=True, progress=progress)
        started = time.monotonic()
        try:
            session.restart_and_check()
        except Violation as exc:
            stats.failures.append(Failure(args.seed, -1, f"after a restart: {exc}"))
        stats.checks += 1
        print(f"restart and check: {time.monotonic() - started:.1f} s")
        print(summary(args, stats, session, start_memory))
        return 1 if stats.failures else 0
    finally:
        try:
            broker.stop(timeout=30)
        except Exception:  # noqa: BLE001 - leave nothing running
            broker.kill_tree()
        if args.keep:
            print(f"scratch kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
