"""Running one benchmark on this tree's broker and on a baseline tree's, in turn (not a
benchmark itself: ``ab_settings.py`` uses it).

Owns what a benchmark of two trees needs (``ab_settings.py --baseline``): the common
arguments (``--baseline TREE``, ``--rounds``, ``--seconds``, ``--socket``,
``--set``), a ``hostbroker serve`` started from a given source tree (its
``PYTHONPATH`` names the tree; the benchmark keeps its own code) in a
scratch directory removed afterwards, the CPU of a broker's whole process
tree, and the rounds that alternate between the two trees.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, REPO]

from harness import Broker, machine_info  # noqa: E402


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--baseline", required=True, metavar="TREE",
                    help="a source tree of hostbroker to compare with (a worktree or clone)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    ap.add_argument("--socket", choices=("unix", "tcp"), default="unix")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")


def is_source_tree(path: str) -> bool:
    """Whether ``path`` holds a hostbroker package to start a broker from."""
    return os.path.isfile(os.path.join(path, "hostbroker", "__init__.py"))


def check_arguments(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if not is_source_tree(a.baseline):
        ap.error(f"--baseline {a.baseline}: no hostbroker package there")
    if a.rounds < 1 or not 0 < a.seconds <= 600:
        ap.error("--rounds must be at least 1 and --seconds within (0, 600]")


def broker_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and every process under it."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root] + root.children(recursive=True):
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def start_from(broker: Broker, tree: str) -> None:
    """Start ``broker`` (its ``hostbroker serve``) with ``tree``'s code."""
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = tree
    try:
        broker.start()
    finally:
        if env_before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_before


@contextlib.contextmanager
def broker_of(tree: str, settings: list[str], prefix: str):
    """``hostbroker serve`` with ``tree``'s code in a new scratch directory;
    stopped and the directory removed on exit."""
    workdir = tempfile.mkdtemp(prefix=prefix)
    broker = Broker(workdir, settings)
    start_from(broker, tree)
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def alternate(a: argparse.Namespace, one_round: Callable[[str], dict],
              line: Callable[[dict], str], summary: Callable[[Callable], str],
              header: str = "") -> dict[str, list[dict]]:
    """``a.rounds`` rounds of ``one_round(tree)`` on this tree then the
    baseline, each printed by ``line``; then each tree's medians, printed by
    ``summary(med)`` where ``med(key, sub=None)`` is the median of that
    figure over the tree's rounds. Returns every round's result, by tree."""
    trees = {"this tree": REPO, "baseline": os.path.abspath(a.baseline)}
    print(machine_info(), header, flush=True)
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for r in range(a.rounds):
        for name, tree in trees.items():
            res = one_round(tree)
            results[name].append(res)
            print(f"round {r + 1} {name:9}: {line(res)}", flush=True)
    print()
    for name, runs in results.items():
        print(f"{name:9} median: {summary(lambda key, sub=None: median(runs, key, sub))}")
    return results


def median(runs: list[dict], key: str, sub: str | None = None) -> float:
    """The median of ``run[key]`` (or ``run[key][sub]``) over the runs that have it."""
    import statistics

    values = [run[key][sub] if sub else run[key] for run in runs if run[key] is not None]
    return statistics.median(values) if values else float("nan")
