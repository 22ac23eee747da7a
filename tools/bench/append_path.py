#!/usr/bin/env python3
"""The writer's append path on its own: does reserving space ahead
(``log.preallocate.bytes``) make appends faster, and does an fdatasync running
beside the appends (the writer's flusher thread) hold them up?

Appends ``--mib`` MiB of 10 KiB entries in 1 MiB message sets through
:class:`hostbroker.log.partition.PartitionLog` into a fresh partition, four
ways, interleaved and repeated: space reserved or not, and with or without a
thread that fdatasyncs the active segment every ``--sync-every-ms`` while the
appends go on (as the flusher does). Prints MB/s and the latency of single
appends (p50, p99, max): a flush that blocked appends would show as appends
as long as the fdatasync. A ``dd`` of the same size into a fresh file in the
same run gives the page cache's speed::

    .venv/bin/python tools/bench/append_path.py --dir /var/tmp --mib 512 --repeats 3

Bounded: ``repeats * 4`` runs of ``--mib`` each, plus one ``dd`` per round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog

MiB = 1 << 20


def message_set() -> tuple[bytes, int]:
    """About 1 MiB of 10 KiB entries, and their count."""
    count = MiB // (10 * 1024)
    return encode_message_set([bytes([i % 251]) * (10 * 1024 - 10) for i in range(count)]), count


def run_once(root: str, mib: int, reserve: bool, sync_every_ms: int | None) -> dict:
    path = tempfile.mkdtemp(dir=root)
    config = LogConfig(segment_bytes=2**31 - 1, flush_messages=2**62, flush_ms=2**62,
                       preallocate_bytes=64 * MiB if reserve else 0)
    log = PartitionLog.create(path, "bench", 0, 1, {}, config)
    data, count = message_set()
    rounds = mib * MiB // len(data)
    stop = threading.Event()
    syncs = []

    def flusher() -> None:
        fd = os.open(log.segment_path(0), os.O_RDONLY)
        try:
            while not stop.wait(sync_every_ms / 1000):
                started = time.perf_counter()
                os.fdatasync(fd)
                syncs.append(time.perf_counter() - started)
        finally:
            os.close(fd)

    thread = None
    if sync_every_ms is not None:
        thread = threading.Thread(target=flusher)
        thread.start()
    latencies = []
    started = time.perf_counter()
    for _ in range(rounds):
        t = time.perf_counter()
        log.append(data, count)
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - started
    stop.set()
    if thread is not None:
        thread.join()
    log.close(flush=False)
    shutil.rmtree(path)
    latencies.sort()
    return {"mb_s": rounds * len(data) / elapsed / 1e6,
            "p50_ms": latencies[len(latencies) // 2] * 1e3,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
            "max_ms": latencies[-1] * 1e3,
            "syncs": len(syncs), "sync_max_ms": max(syncs, default=0) * 1e3}


def dd(root: str, mib: int) -> float:
    target = os.path.join(root, "dd.out")
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}"],
                   check=True, capture_output=True)
    elapsed = time.perf_counter() - started
    os.unlink(target)
    return mib * MiB / elapsed / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary dir)")
    parser.add_argument("--mib", type=int, default=512, help="MiB appended per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sync-every-ms", type=int, default=100)
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="hb-append-", dir=args.dir)
    ways = [(False, None), (True, None), (False, args.sync_every_ms), (True, args.sync_every_ms)]
    results: dict[tuple, list[dict]] = {way: [] for way in ways}
    dds = []
    try:
        for _ in range(args.repeats):
            dds.append(dd(root, args.mib))
            for way in ways:
                results[way].append(run_once(root, args.mib, *way))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.mib} MiB of 10 KiB entries in ~1 MiB appends, {args.repeats} rounds, "
          f"interleaved; best / median")
    print(f"dd to a fresh file: {max(dds):.0f} / {statistics.median(dds):.0f} MB/s")
    for (reserve, sync), runs in results.items():
        speeds = [r["mb_s"] for r in runs]
        label = (f"{'reserved' if reserve else 'plain   '}  "
                 f"{'fdatasync every %d ms beside' % sync if sync else 'no fdatasync beside':32}")
        print(f"{label}  {max(speeds):6.0f} / {statistics.median(speeds):6.0f} MB/s"
              f"  (x{max(speeds) / max(dds):.2f} / x{statistics.median(speeds) / statistics.median(dds):.2f} of dd)"
              f"  append p50 {statistics.median(r['p50_ms'] for r in runs):.2f} ms"
              f"  p99 {statistics.median(r['p99_ms'] for r in runs):.2f}"
              f"  max {max(r['max_ms'] for r in runs):.1f}"
              + (f"  | {sum(r['syncs'] for r in runs)} syncs, longest "
                 f"{max(r['sync_max_ms'] for r in runs):.1f} ms" if sync else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
