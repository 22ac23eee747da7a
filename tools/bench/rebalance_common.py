"""What the rebalance benchmarks share (tools/bench/rebalance_zk.py, rebalance_standalone.py).

:func:`run_cycles` runs the members' joins one at a time up to a count, then
their leaves one at a time, for some cycles, and prints each cycle's times
and the p50 and maximum of joins and leaves. :func:`wait_until` polls a
condition on a short interval up to a deadline and says when it turned true.
How a member is started, stopped and timed is each benchmark's own.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], deadline: float, what: str,
               interval: float = 0.002) -> float:
    """The ``time.monotonic()`` at which ``condition()`` was first seen true."""
    while True:
        if condition():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(interval)


def _ms(times: list[float]) -> str:
    return ", ".join(f"{t * 1000:.0f}" for t in times)


def run_cycles(cycles: int, members: int, join: Callable[[], float],
               leave: Callable[[], float]) -> tuple[list[float], list[float]]:
    """``join()`` ``members`` times, then ``leave()`` as many, ``cycles`` times; each
    returns the seconds its change took. Prints and returns the join and leave times."""
    joins: list[float] = []
    leaves: list[float] = []
    for cycle in range(cycles):
        for _ in range(members):
            joins.append(join())
        for _ in range(members):
            leaves.append(leave())
        print(f"cycle {cycle + 1}: joins {_ms(joins[-members:])} ms; "
              f"leaves {_ms(leaves[-members:])} ms", flush=True)
    for name, times in (("join", joins), ("leave", leaves)):
        print(f"{name}: p50 {statistics.median(times) * 1000:.0f} ms, "
              f"max {max(times) * 1000:.0f} ms over {len(times)} changes", flush=True)
    return joins, leaves
