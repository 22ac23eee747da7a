"""How much does one shared-memory ring move between two processes? (not collected by pytest)

Run ``.venv/bin/python tools/bench/ring_throughput.py``. The producer is a forked
child, the consumer the parent; both spin instead of sleeping, so the figures
are the ring's own cost. ``ring.py`` quotes them.
"""

from __future__ import annotations

import os
import sys
import time

from hostbroker.shm.ring import Ring


def _produce(ring: Ring, record_size: int, count: int, batch: int) -> None:
    batch_of = [os.urandom(record_size)] * batch
    sent = 0
    while sent < count:
        sent += ring.put_many(batch_of[: count - sent])
        ring.publish()


def measure(record_size: int, count: int, batch: int = 256, capacity: int = 4 << 20, copy: bool = False) -> float:
    """Seconds to move ``count`` records of ``record_size`` bytes."""
    name = f"/hb-bench{os.getpid()}-ring-0"
    ring = Ring.create(name, capacity)
    try:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                _produce(ring, record_size, count, batch)
                status = 0
            finally:
                os._exit(status)
        start = time.perf_counter()
        received = 0
        while received < count:
            records = ring.read()
            if copy:
                for record in records:
                    bytes(record)
            received += len(records)
            del records
            ring.release()
        elapsed = time.perf_counter() - start
        _, status = os.waitpid(pid, 0)
        if status:
            raise RuntimeError(f"producer failed: {status}")
        return elapsed
    finally:
        ring.close()
        ring.unlink()


def _best(runs: int, work: float, *args, **kwargs) -> tuple[float, float]:
    """(best, median) rate of ``work`` units per second over ``runs`` runs."""
    rates = sorted(work / measure(*args, **kwargs) for _ in range(runs))
    return rates[-1], rates[len(rates) // 2]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    big, count = 64 * 1024, 40_000
    for copy in (False, True):
        best, median = _best(runs, big * count / 1e9, big, count, batch=1, copy=copy)
        label = "views copied out" if copy else "views only"
        print(f"64 KiB records, {label}: best {best:.1f} GB/s, median {median:.1f}")
    count = 1_000_000
    for batch in (1, 16, 256):
        best, median = _best(runs, count / 1e6, 100, count, batch=batch)
        print(f"100 B records, batches of {batch}: best {best:.2f} M records/s, median {median:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
