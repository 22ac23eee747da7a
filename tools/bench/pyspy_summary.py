#!/usr/bin/env python3
"""Where do a profiled run's processes spend their busy time? Summarises the py-spy profiles
that ``broker_throughput.py --profile DIR`` records.

Each ``DIR/<phase>.<process>.txt`` is py-spy's ``--format raw`` output
(collapsed stacks, ``frame;frame;... count``) recorded with ``--idle``, so
every sample is a slice of wall time. Samples whose leaf is a wait (a worker
in ``select`` on its doorbell, the client waiting for GO, a helper thread
such as the writer's flusher blocked in ``queue.get()`` for its next job) are
counted as idle and left out; for the rest ("busy" samples: running Python, or in any
other system call, e.g. ``recv``, ``sendall``, ``fdatasync``, ``eventfd_write``)
this prints the share by leaf function ("self") and the share whose stack
passes through a function ("total"), in percent of busy samples. How busy
each process was comes from the CPU figures of the benchmark itself::

    .venv/bin/python tools/bench/pyspy_summary.py /tmp/hb-prof
    .venv/bin/python tools/bench/pyspy_summary.py /tmp/hb-prof --phase unix-produce_100B --top 15
    .venv/bin/python tools/bench/pyspy_summary.py /tmp/hb-prof --lines   # leaf lines, not functions

Waits in C that py-spy shows only as a Python line (``SimpleQueue.get()``)
are told by that line's source text, read from ``--source`` (default: this
repository), so summarise profiles against the code that recorded them.
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import linecache
import os
import re

# Leaf functions in which a process sleeps: their samples are idle time (the
# benchmark client waiting for GO, a worker waiting on its doorbell).
_IDLE = {"EpollSelector.select", "PollSelector.select", "select", "poll", "handshake",
         "readline", "sleep", "wait", "Doorbell.wait"}
# A leaf *line* that blocks in C until another thread hands over work: py-spy
# shows no frame for SimpleQueue.get, so the wait is told by its source line
# (the writer's flusher waiting for its next fdatasync job).
_WAIT_LINE = re.compile(r"\.get\(\s*\)")
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_source_root = _REPO  # --source: the tree the profiled processes ran (line numbers must match)
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]+):(?P<line>\d+)\)$")


def parse(path: str) -> tuple[int, list[tuple[list[str], int]]]:
    stacks = []
    total = 0
    with open(path) as f:
        for raw in f:
            raw = raw.rstrip("\n")
            if not raw:
                continue
            stack, _, count = raw.rpartition(" ")
            n = int(count)
            total += n
            stacks.append((stack.split(";"), n))
    return total, stacks


@functools.lru_cache(maxsize=None)
def _source(file: str) -> str | None:
    """The source file py-spy names ``file`` (often just its base name)."""
    if os.path.isabs(file):
        return file if os.path.exists(file) else None
    if os.path.exists(os.path.join(_source_root, file)):
        return os.path.join(_source_root, file)
    found = glob.glob(os.path.join(_source_root, "**", os.path.basename(file)), recursive=True)
    found = [f for f in found if "/.venv/" not in f]
    return found[0] if len(found) == 1 else None


def is_idle(frames: list[str]) -> bool:
    if not frames:
        return True
    m = _FRAME.match(frames[-1])
    if not m:
        return frames[-1] in _IDLE
    if m["func"] in _IDLE:
        return True
    path = _source(m["file"])
    return bool(path and _WAIT_LINE.search(linecache.getline(path, int(m["line"]))))


def short(frame: str, with_line: bool) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    name = os.path.basename(m["file"])
    return f"{m['func']} ({name}:{m['line']})" if with_line else f"{m['func']} ({name})"


def summarise(path: str, top: int, lines: bool) -> str:
    total, stacks = parse(path)
    if not total:
        return f"{os.path.basename(path)}: no samples\n"
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    idle = 0
    for frames, n in stacks:
        if is_idle(frames):
            idle += n
            continue
        leaf[short(frames[-1], lines)] += n
        for name in {short(f, False) for f in frames}:
            inclusive[name] += n
    busy = total - idle
    out = [f"{os.path.basename(path)}: {total} samples, {busy} busy "
           f"(percentages below are of busy samples)"]
    if not busy:
        return out[0] + "\n"
    out.append("  self:")
    for name, n in leaf.most_common(top):
        out.append(f"    {n / busy:6.1%}  {name}")
    out.append("  total (through):")
    skip = ("<module>", "_run_module_as_main", "_run_code", "main (", "_serve", "serve (",
            "Supervisor.", "child_main", "Worker.main")
    shown = 0
    for name, n in inclusive.most_common():
        if name.startswith(skip) or n == busy:
            continue
        out.append(f"    {n / busy:6.1%}  {name}")
        shown += 1
        if shown == top:
            break
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--phase", help="only files of this phase (e.g. unix-produce_100B)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--lines", action="store_true", help="self time by line, not by function")
    ap.add_argument("--min-samples", type=int, default=20,
                    help="skip processes with fewer non-idle samples (idle workers)")
    ap.add_argument("--source", metavar="DIR", default=_REPO,
                    help="the source tree the profiled processes ran, to read leaf lines from "
                         "(default: this repository; give the tree of the profiled commit if "
                         "the code has changed since)")
    args = ap.parse_args(argv)
    global _source_root
    _source_root = os.path.abspath(args.source)
    pattern = f"{args.phase}.*.txt" if args.phase else "*.txt"
    for path in sorted(glob.glob(os.path.join(args.dir, pattern))):
        total, stacks = parse(path)
        busy = sum(n for frames, n in stacks if not is_idle(frames))
        if busy < args.min_samples:
            continue
        print(summarise(path, args.top, args.lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
