#!/usr/bin/env python3
"""What quota accounting costs a producer: three brokers, measured alternately.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/quota_cost.py --rounds 3 --seconds 3

Starts three ``hostbroker serve`` (``harness.Broker``: free ports, scratch
data, stopped by PID), each with one topic of one partition, that differ
only in their ``quotas.json`` (written into the first log dir before
start):

- ``none``: no quotas at all (nothing counted anywhere);
- ``other``: a quota for another principal only (the producer's principal
  has none: its connection is not metered);
- ``metered``: a quota for the producer's own principal (``User:ANONYMOUS``
  over TCP) far above what it sends: every request and answer counted in
  the shared table and its rate measured, never held.

The load, on each in turn (``none``, ``other``, ``metered``, ``--rounds``
times, each bounded by ``--seconds``): one client over TCP producing sets of
``--messages`` messages of 100 B, acks=1, one request at a time (small
requests: the per-request cost shows most). Prints requests/s per round,
the median of each side and the ratios ``other/none`` and
``metered/none``. Alternating in one run is what makes them comparable on
a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

from hostbroker.client.simple import SimpleClient  # noqa: E402
from hostbroker.log.message import encode_message_set  # noqa: E402
from hostbroker.security.quota import Quota, QuotaSet  # noqa: E402
from hostbroker.security.store import write_quotas  # noqa: E402
from harness import Broker, log, warm_up  # noqa: E402

SIDES = {
    "none": None,
    "other": {"User:somebody-else": Quota(producer_byte_rate=1000)},
    "metered": {"User:ANONYMOUS": Quota(producer_byte_rate=2**40, request_rate=2**30)},
}
MAX_SECONDS = 30.0


def produce_for(broker: Broker, seconds: float, messages: int) -> float:
    """Requests/s of one TCP client producing for ``seconds``."""
    data = encode_message_set([b"x" * 100] * messages)
    with SimpleClient(broker.uri("tcp")) as client:
        client.produce("quota-bench", 0, data)
        done = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            client.produce("quota-bench", 0, data)
            done += 1
        return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--messages", type=int, default=1, help="messages per set (default 1)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for all three")
    args = parser.parse_args()
    seconds = min(args.seconds, MAX_SECONDS)
    rounds = max(1, min(args.rounds, 20))
    brokers: dict[str, Broker] = {}
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as scratch:
        try:
            for side, entities in SIDES.items():
                workdir = os.path.join(scratch, side)
                os.makedirs(os.path.join(workdir, "logs"))
                if entities is not None:
                    write_quotas(os.path.join(workdir, "logs"), QuotaSet(entities))
                broker = brokers[side] = Broker(workdir, args.set)
                broker.start()
                warm_up(broker)
                with SimpleClient(broker.uri("unix")) as client:
                    client.create_topic("quota-bench", 1)
            results: dict[str, list[float]] = {side: [] for side in SIDES}
            for r in range(rounds):
                for side, broker in brokers.items():
                    rate = produce_for(broker, seconds, args.messages)
                    results[side].append(rate)
                    log(f"round {r + 1} {side}: {rate:,.0f} requests/s")
        finally:
            for broker in brokers.values():
                broker.stop()
    medians = {side: statistics.median(rates) for side, rates in results.items()}
    for side, median in medians.items():
        print(f"{side:8} median {median:10,.0f} requests/s  best {max(results[side]):10,.0f}")
    print(f"other/none   {medians['other'] / medians['none']:.3f}")
    print(f"metered/none {medians['metered'] / medians['none']:.3f}")


if __name__ == "__main__":
    main()
