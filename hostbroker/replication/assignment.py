"""Where a replicated topic's partitions live: the replica lists of
``topics create --replication-factor`` and of ``reassign generate``.

Kafka's round-robin, for brokers without racks: the brokers sorted by id;
partition ``p``'s first replica (its preferred leader) is broker
``(start + p) mod n``, so leaderships spread evenly from a random start; its
other replicas follow the first at a distance ``1 + (shift + j) mod (n - 1)``
for the j-th follower, where ``shift`` is random and grows by one every ``n``
partitions, so that the followers of one broker's leaderships spread over the
other brokers instead of all landing on its neighbour. No broker holds two
replicas of one partition.

Pure: the randomness is a ``random.Random`` the caller may pass (or ``start``
and ``shift`` fixed, for tests and for a repeatable plan).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from hostbroker.protocol.replica_fields import MAX_REPLICAS

__all__ = ["MAX_PARTITIONS", "assign_replicas", "reassignment_plan", "replication_factor_of"]

# a bound of the computation; cluster/replica_nodes.py bounds what ZooKeeper may hold
MAX_PARTITIONS = 1 << 20


def _check(brokers: Sequence[int], partitions: int, rf: int) -> list[int]:
    ordered = sorted(brokers)
    if len(set(ordered)) != len(ordered):
        raise ValueError("the broker list names a broker twice")
    if any(type(b) is not int or not 0 <= b < 2**31 for b in ordered):
        raise ValueError("a broker id is not an integer from 0 to 2147483647")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"partition count {partitions} is not 1 to {MAX_PARTITIONS}")
    if rf < 1:
        raise ValueError(f"replication factor {rf} is not positive")
    if rf > MAX_REPLICAS:
        raise ValueError(f"replication factor {rf} is over the most replicas a partition "
                         f"may have ({MAX_REPLICAS})")
    if rf > len(ordered):
        raise ValueError(f"replication factor {rf} is larger than the {len(ordered)} "
                         f"available broker{'s' if len(ordered) != 1 else ''}")
    return ordered


def assign_replicas(brokers: Sequence[int], partitions: int, rf: int,
                    start: int | None = None, shift: int | None = None,
                    first_partition: int = 0,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """``{partition: [broker ids]}`` for partitions ``first_partition`` ..
    ``first_partition + partitions - 1``, each list ``rf`` distinct brokers, the
    preferred leader first. ``start`` and ``shift`` default to random ones
    (from ``rng``). ValueError naming the problem for ``rf`` over the brokers
    there are or over MAX_REPLICAS, a broker named twice, a count out of range."""
    ordered = _check(brokers, partitions, rf)
    n = len(ordered)
    rng = rng or random.Random()
    start = rng.randrange(n) if start is None else start % n
    shift = rng.randrange(n) if shift is None else shift
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        for j in range(rf - 1):
            replicas.append(ordered[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def replication_factor_of(assignment: Mapping[int, Sequence[int]]) -> int:
    """A topic's replication factor: the length of its lowest partition's replica
    list (as Kafka counts it); ValueError for an empty assignment."""
    if not assignment:
        raise ValueError("a topic without partitions has no replication factor")
    return len(assignment[min(assignment)])


def reassignment_plan(current: Mapping[str, Mapping[int, Sequence[int]]],
                      brokers: Sequence[int], start: int | None = None,
                      shift: int | None = None, rng: random.Random | None = None,
                      rf: int | None = None) -> dict[tuple[str, int], list[int]]:
    """The plan of ``reassign generate``: every partition of the topics of
    ``current`` (``{topic: {partition: replicas}}``) placed anew on ``brokers``
    with its topic's replication factor (or ``rf``, a new one), as
    ``{(topic, partition): replicas}`` (what ``/admin/reassign_partitions``
    takes). Partitions whose replicas
    stay the same set in the same order are left out. ValueError as
    :func:`assign_replicas`, naming the topic."""
    rng = rng or random.Random()
    plan: dict[tuple[str, int], list[int]] = {}
    for topic in sorted(current):
        assignment = current[topic]
        factor = rf if rf is not None else replication_factor_of(assignment)
        count = max(assignment) + 1
        try:
            proposed = assign_replicas(brokers, count, factor, start, shift, rng=rng)
        except ValueError as exc:
            raise ValueError(f"topic {topic}: {exc}") from None
        for p in sorted(assignment):
            if list(assignment[p]) != proposed[p]:
                plan[(topic, p)] = proposed[p]
    return plan
