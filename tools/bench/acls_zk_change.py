#!/usr/bin/env python3
"""What one ACL change through ZooKeeper costs at many ACLs (``hostbroker acls
--zookeeper``, hostbroker/cluster/acls_zk_store.py).

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/acls_zk_change.py --acls 20000 --rounds 3

One ZooKeeper (Debian's ``ZooKeeperServerMain``, tests/cluster/zkserver.py) with
``--acls`` bindings in Kafka's layout, one a resource (literal topics, a tenth
of them prefixed), written straight to the nodes. Then, alternately each round:

- ``whole``: the change as made by reading the whole layout first (every
  node, each decoded and checked: :func:`read_acls`), then the node changed;
- ``node``: the change as the store makes it now (:func:`add_acls`,
  :func:`remove_acls`): a removal the children lists and the one node
  changed; an add every node (its count against ``acl.max.bindings`` is
  exact), so its ratio is about 1;

each an add of one binding and its removal, and a ``list`` of one literal
resource (``whole`` reads everything and filters). Prints each timing and the
medians, and ``whole / node``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from hostbroker.cluster import acls_zk as layout  # noqa: E402
from hostbroker.cluster import acls_zk_store as store  # noqa: E402
from hostbroker.security.acl import (AclBinding, AclFilter, Operation, PatternType,  # noqa: E402
                                     Permission, ResourceType)
from hostbroker.security.principals import Principal  # noqa: E402
from tests.cluster.zkserver import ZooKeeperServer  # noqa: E402

MAX = 100_000


def binding(i: int, name: str | None = None, pattern=PatternType.LITERAL) -> AclBinding:
    return AclBinding.checked(ResourceType.TOPIC, name or f"topic-{i:06d}", pattern,
                              Principal.parse(f"User:user-{i % 97}"), "*", Operation.READ,
                              Permission.ALLOW)


def fill(client, count: int) -> None:
    """``count`` bindings, one a node, written in batches of async creates."""
    for root in (layout.type_root(p, ResourceType.TOPIC) for p in layout.ROOTS):
        client.ensure_path(root)
    batch = []
    for i in range(count):
        pattern = PatternType.PREFIXED if i % 10 == 9 else PatternType.LITERAL
        b = binding(i, pattern=pattern)
        path = layout.resource_path(ResourceType.TOPIC, b.name, pattern)
        batch.append(client.create_async(path, layout.encode_acl_node([b])))
        if len(batch) >= 2000:
            for r in batch:
                r.get(timeout=60)
            batch = []
    for r in batch:
        r.get(timeout=60)


def whole_add(client, bindings) -> None:
    """The add as made before: every node read, then the nodes changed."""
    kept = store.read_acls(client, max_bindings=MAX, strict=False)
    new = set(bindings) - set(kept)
    assert len(kept) + len(new) <= MAX
    by = {}
    for b in bindings:
        by.setdefault((b.resource_type, b.name, b.pattern), set()).add(b)
    store._change_acls(client, by, store.DEFAULT, MAX, lambda r, current: current | by[r])


def whole_remove(client, filters) -> None:
    kept = store.read_acls(client, max_bindings=MAX, strict=False)
    doomed = {(b.resource_type, b.name, b.pattern) for b in kept
              if any(f.matches(b) for f in filters)}
    store._change_acls(client, {r: None for r in doomed}, store.DEFAULT, MAX,
                       lambda _r, current: frozenset(
                           b for b in current if not any(f.matches(b) for f in filters)))


def whole_list(client, f) -> list:
    return [b for b in store.read_acls(client, max_bindings=MAX, strict=False)
            if f.matches(b)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from kazoo.client import KazooClient

    root = tempfile.mkdtemp(prefix="hb-bench-aclszk-")
    zk = ZooKeeperServer(root).start()
    client = KazooClient(hosts=zk.connect, timeout=30)
    client.start(timeout=30)
    try:
        started = time.monotonic()
        fill(client, args.acls)
        print(f"{args.acls} ACLs written in {time.monotonic() - started:.1f} s")
        times: dict[str, list[float]] = {}
        extra = binding(7, "topic-000007")  # another principal on a resource kept
        extra = AclBinding.checked(extra.resource_type, extra.name, extra.pattern,
                                   Principal.parse("User:bench"), "*", Operation.WRITE,
                                   Permission.ALLOW)
        gone = AclFilter(resource_type=ResourceType.TOPIC, name="topic-000007",
                         pattern=PatternType.LITERAL, principal=Principal.parse("User:bench"))
        one = AclFilter(resource_type=ResourceType.TOPIC, name="topic-000123",
                        pattern=PatternType.LITERAL)
        ways = {
            "whole": (lambda: whole_add(client, [extra]), lambda: whole_remove(client, [gone]),
                      lambda: whole_list(client, one)),
            "node": (lambda: store.add_acls(client, [extra], max_bindings=MAX),
                     lambda: store.remove_acls(client, [gone], max_bindings=MAX),
                     lambda: store.list_acls(client, one, max_bindings=MAX)),
        }
        for r in range(args.rounds):
            for way, (add, remove, listing) in ways.items():
                for what, call in (("add", add), ("remove", remove), ("list", listing)):
                    t = time.monotonic()
                    call()
                    took = time.monotonic() - t
                    times.setdefault(f"{way} {what}", []).append(took)
                    print(f"round {r + 1} {way:5} {what:6} {took * 1000:9.1f} ms", flush=True)
        print()
        for what in ("add", "remove", "list"):
            w = statistics.median(times[f"whole {what}"])
            n = statistics.median(times[f"node {what}"])
            print(f"{what:6}: whole {w * 1000:9.1f} ms  node {n * 1000:8.1f} ms  "
                  f"whole / node {w / n:7.1f}")
    finally:
        client.stop()
        client.close()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
