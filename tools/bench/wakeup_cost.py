"""What waking a sleeping process costs on this machine (not collected by pytest).

Run ``.venv/bin/python tools/bench/wakeup_cost.py [--rounds N]``. A forked
child sleeps in ``epoll`` on one eventfd and answers on another; the parent,
every 0.5 ms (so the child is asleep each time), writes the first and waits
for the answer. Prints, in µs, what the ``eventfd`` write that wakes the
sleeper costs the writer, the whole round trip, and a write nobody waits
for: the price of each doorbell a worker rings (``shm/doorbell.py``), which
in a VM includes waking the other vCPU. ``--thread`` makes the sleeper a
thread of the same process instead: what crossing a process boundary adds
to a wake-up, against what waking a thread costs anyway.
"""

from __future__ import annotations

import argparse
import os
import select
import threading
import time


def percentile(values: list[int], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] / 1000


def _sleeper(ping: int, pong: int, rounds: int) -> None:
    ep = select.epoll()
    ep.register(ping, select.EPOLLIN)
    for _ in range(rounds):
        ep.poll()
        os.eventfd_read(ping)
        os.eventfd_write(pong, 1)
    ep.close()


def measure(rounds: int, thread: bool = False) -> dict:
    ping = os.eventfd(0, os.EFD_NONBLOCK)
    pong = os.eventfd(0, os.EFD_NONBLOCK)
    if thread:
        sleeper = threading.Thread(target=_sleeper, args=(ping, pong, rounds), daemon=True)
        sleeper.start()
    else:
        pid = os.fork()
        if pid == 0:
            _sleeper(ping, pong, rounds)
            os._exit(0)
    ep = select.epoll()
    ep.register(pong, select.EPOLLIN)
    writes, trips = [], []
    try:
        for _ in range(rounds):
            time.sleep(0.0005)
            t0 = time.perf_counter_ns()
            os.eventfd_write(ping, 1)
            t1 = time.perf_counter_ns()
            if not ep.poll(5):
                raise SystemExit("the sleeper did not answer")
            os.eventfd_read(pong)
            writes.append(t1 - t0)
            trips.append(time.perf_counter_ns() - t0)
    finally:
        if thread:
            sleeper.join(10)
        else:
            os.waitpid(pid, 0)
    spare = os.eventfd(0, os.EFD_NONBLOCK)
    t0 = time.perf_counter_ns()
    for _ in range(10_000):
        os.eventfd_write(spare, 1)
    idle_write = (time.perf_counter_ns() - t0) / 10_000 / 1000
    for fd in (ping, pong, spare):
        os.close(fd)
    return {"wake_write_p50_us": percentile(writes, 0.5),
            "wake_write_p90_us": percentile(writes, 0.9),
            "round_trip_p50_us": percentile(trips, 0.5),
            "round_trip_p90_us": percentile(trips, 0.9),
            "write_nobody_waits_us": round(idle_write, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3000, help="wake-ups to time (default 3000)")
    ap.add_argument("--thread", action="store_true",
                    help="the sleeper is a thread of this process, not a child process")
    args = ap.parse_args()
    if args.rounds < 10:
        ap.error("--rounds must be at least 10")
    for key, value in measure(args.rounds, args.thread).items():
        print(f"{key:24} {value:8.2f}")


if __name__ == "__main__":
    main()
