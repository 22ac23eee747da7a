"""Which source tree does a broker run? Starting ``hostbroker serve`` from another tree
(not a benchmark itself: ``ab_settings.py --a-tree`` uses it).

Owns: whether a directory holds a hostbroker package (:func:`is_source_tree`),
and starting a :class:`harness.Broker` with that tree's code
(:func:`start_from`: its ``PYTHONPATH`` names the tree; the benchmark keeps
its own code).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, REPO]

from harness import Broker  # noqa: E402


def is_source_tree(path: str) -> bool:
    """Whether ``path`` holds a hostbroker package to start a broker from."""
    return os.path.isfile(os.path.join(path, "hostbroker", "__init__.py"))


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
