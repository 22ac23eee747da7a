#!/usr/bin/env python3
"""The long run of the hostile-client fuzz (docs/fuzzing.md).

Starts ``hostbroker serve`` in a scratch directory (as the standing suite
does), then sends seeded batches of hostile requests over TCP and the Unix
socket until ``--seconds`` or ``--cases`` requests, checking every invariant
of tests/hostile each ``--check-every`` batches: no worker replaced, the
broker tree's RSS within its bound, a normal client answered within 2 s, no
acknowledged message or commit lost; and at the end again after a restart.
The generators, the exchange and the checks are the suite's own
(tests/hostile/fuzzlib.py, invariants.py, runner.py).

    .venv/bin/python tools/fuzz_broker.py --seconds 3600 --cases 5000000
    .venv/bin/python tools/fuzz_broker.py --seed 7 --replay 1234   # one batch again

Prints a summary (requests, batches, rates, failures each with the seed and
batch that reproduce it) and exits 1 on any violation, 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hostbroker.protocol import api  # noqa: E402
from tests.hostile import fuzzlib  # noqa: E402
from tests.hostile.fuzzlib import FUZZ_BROKER_SETTINGS, Violation  # noqa: E402
from tests.hostile.runner import Failure, Session, Stats  # noqa: E402
from tests.integration.broker import Broker  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int,
                   default=int(os.environ.get("HB_FUZZ_SEED", fuzzlib.DEFAULT_SEED)))
    p.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
    p.add_argument("--cases", type=int, default=10_000_000, help="stop after this many requests")
    p.add_argument("--first-batch", type=int, default=0, help="batch index to start at")
    p.add_argument("--batch-size", type=int, default=None,
                   help="requests per connection (default: 1-5, drawn per batch)")
    p.add_argument("--check-every", type=int, default=500, help="batches between checks")
    p.add_argument("--jobs", type=int, default=4, help="batches sent at once, each on its own "
                   "connection")
    p.add_argument("--replay", type=int, default=None, metavar="BATCH",
                   help="send only this batch of --seed, show its frames and outcome")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return p.parse_args(argv)


def summary(args: argparse.Namespace, stats: Stats, session: Session) -> str:
    seconds = max(stats.seconds, 1e-9)
    names = {int(k): k.name for k in api.ApiKey}
    by_api = ", ".join(f"{names.get(k, f'key {k}')} {n:,}"
                       for k, n in sorted(stats.by_api.items(), key=lambda kv: -kv[1])[:12])
    lines = [
        f"seed {args.seed}, batches {args.first_batch}..{args.first_batch + stats.batches - 1}",
        f"requests {stats.requests:,} in {stats.batches:,} batches over {seconds:.0f} s: "
        f"{stats.requests / seconds:,.0f} requests/s, {stats.batches / seconds:,.0f} batches/s",
        f"answered {stats.answered:,}, refused with an error frame {stats.error_frames:,}, "
        f"invariant checks {stats.checks:,}",
        f"by api: {by_api}",
    ]
    if session.tree is not None:
        lines.append(f"broker tree RSS: start {session.tree.baseline_rss / 2**20:.0f} MiB, "
                     f"peak {session.tree.peak_rss / 2**20:.0f} MiB, "
                     f"bound {session.tree.bound / 2**20:.0f} MiB")
    lines.append(f"violations: {len(stats.failures)}")
    for failure in stats.failures:
        again = (f"tools/fuzz_broker.py --seed {failure.seed} --replay {failure.batch}"
                 if failure.batch >= 0 else "a periodic check")
        lines.append(f"  [{again}] {failure.message}")
    return "\n".join(lines)


def replay(session: Session, batch: int) -> int:
    frames = fuzzlib.batch_frames(fuzzlib.batch_rng(session.seed, batch), session.ctx)
    for frame in frames:
        print(f"  {len(frame):>9} bytes  {fuzzlib.expectation(frame)}  {frame[:24].hex()}...")
    try:
        session.batch(batch)
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
            return replay(session, args.replay)

        def progress(stats: Stats) -> None:
            print(f"  {stats.seconds:7.0f} s  {stats.requests:>12,} requests  "
                  f"{stats.requests / max(stats.seconds, 1e-9):>8,.0f}/s  "
                  f"violations {len(stats.failures)}", flush=True)

        stats = session.run(args.first_batch, 2**62, seconds=args.seconds,
                            check_every=args.check_every, keep_going=True,
                            size=args.batch_size, max_requests=args.cases, jobs=args.jobs,
                            progress=progress)
        started = time.monotonic()
        try:
            session.restart_and_check()
        except Violation as exc:
            stats.failures.append(Failure(args.seed, -1, f"after a restart: {exc}"))
        stats.checks += 1
        print(f"restart and check: {time.monotonic() - started:.1f} s")
        print(summary(args, stats, session))
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
