#!/usr/bin/env python3
"""What decoding the protocol's bodies costs, this tree against a baseline tree.

Run by hand (not a test), from the repository with its venv::

    git worktree add /tmp/hb-base HEAD~1     # or any tree to compare with
    .venv/bin/python tools/bench/decode_ab.py --baseline /tmp/hb-base --rounds 3

Each round times, in a fresh interpreter per tree (``PYTHONPATH`` names the
tree), the decoding of: a METADATA answer for ``--partitions`` partitions
(topics of 8, a log dir of 16 bytes), as a client decodes it; a FETCH answer
of 16 partitions (headers and message set views); a PRODUCE request of 50
partitions, as a handler decodes it; and a METADATA request naming one
topic. The trees alternate, and each figure is the best of 7 repeats, in µs
per body. The ratio is the baseline's time over this tree's, by median over the
rounds (and each round's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TIMER = r"""
import json, sys, timeit
from hostbroker.errors import ErrorCode as E
from hostbroker.protocol import api
n = int(sys.argv[1])
part = lambda p: api.MetadataPartition(p, E.NONE, 0, 10, 10_000, "/var/lib/hb/logs")
meta = api.MetadataResponse(0, (api.MetadataBroker(0, "127.0.0.1", 9092, "/run/hb.sock"),),
                            tuple(api.MetadataTopic(f"topic-{i}", E.NONE,
                                                    tuple(part(p) for p in range(8)))
                                  for i in range(n // 8)))
fetch = api.FetchResponse(tuple(api.FetchPartitionResult(f"topic-{i}", i, E.NONE, 1 << 40,
                                                         b"x" * 300) for i in range(16)))
produce = api.ProduceRequest(1, 1000, tuple(api.ProducePartition(f"topic-{i}", i, b"x" * 100)
                                            for i in range(50)))
bodies = {
    "METADATA answer": lambda f=api.encode_answer(7, meta, 1 << 30)[0][4:]:
        api.decode_response(api.ApiKey.METADATA, f),
    "FETCH answer, 16 partitions": lambda f=api.encode_answer(7, fetch, 1 << 30)[0][4:]:
        api.decode_response(api.ApiKey.FETCH, f),
    "PRODUCE request, 50 partitions": lambda f=api.encode_request(produce, 3, "bench")[4:]:
        api.decode_request(f, 10_000),
    "METADATA request, one topic": lambda f=api.encode_request(
        api.MetadataRequest(("topic-1",)), 3, "bench")[4:]: api.decode_request(f, 10_000),
}
out = {}
for name, decode in bodies.items():
    number = max(1, int(0.05 / max(timeit.timeit(decode, number=1), 1e-7)))
    out[name] = min(timeit.repeat(decode, number=number, repeat=7)) / number * 1e6
print(json.dumps(out))
"""


def time_tree(tree: str, partitions: int) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, "-c", TIMER, str(partitions)], env=env, cwd="/",
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="decode_ab.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="a checkout of the tree to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2000)
    a = ap.parse_args(argv)
    runs: dict[str, list[dict]] = {"this tree": [], "baseline": []}
    for r in range(a.rounds):
        for label, tree in (("this tree", ROOT), ("baseline", a.baseline)):
            runs[label].append(time_tree(tree, a.partitions))
            print(f"round {r + 1} {label:9}: " + ", ".join(
                f"{k} {v:,.1f}" for k, v in runs[label][-1].items()), "µs", flush=True)
    print()
    for name in runs["this tree"][0]:
        mine = [run[name] for run in runs["this tree"]]
        base = [run[name] for run in runs["baseline"]]
        ratios = [b / m for m, b in zip(mine, base)]
        print(f"{name:32} this tree {statistics.median(mine):>10,.1f} µs  baseline "
              f"{statistics.median(base):>10,.1f} µs  baseline/this "
              f"{statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
