"""Changing a replicated topic in ZooKeeper: its config and its partition count.

The ZooKeeper side of ``topics alter --zookeeper`` (docs/cluster.md,
"Changing a replicated topic"), in Kafka 0.8.1's layout::

    /config/topics/[topic]                 {"version":1,"config":{"k":"v",...}}   persistent
    /config/changes/config_change_NNNNNNNNNN   "topic" (a JSON string)            persistent sequential
    /brokers/topics/[topic]                {"version":1,"partitions":{...}}       persistent

A config change writes the topic's whole config node (version-checked) and a
sequential change node naming the topic, in one transaction with the grown
assignment when partitions are added too (:func:`commit`: all or nothing).
The controller watches
``/config/changes`` (hostbroker/cluster/controller_topics.py), reads the
topic's config again and tells every replica in a LEADER_AND_ISR, whose
writers replace the partition's overrides with it (a key left out is
removed). Adding partitions rewrites the assignment node with the old
partitions as they are and replicas for the new ones only; the controller,
which watches each topic node, gives them states and tells their brokers.

Pure but for :func:`commit` and :func:`notify_config_change`, which take a
kazoo client (the command's). Values read back are
hostile: :func:`decode_change` bounds and checks a change node as
``cluster/replica_nodes.py`` does the others.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence

from hostbroker.cluster.zkread import DEFAULT, Bounds, check_size, name_ok, nested_deeper
from hostbroker.cluster import replica_nodes
from hostbroker.replication import MAX_REPLICAS
from hostbroker.replication.assignment import assign_replicas, replication_factor_of

CONFIG_CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"


def change_path_prefix() -> str:
    """What a sequential change node is created as (ZooKeeper appends the number)."""
    return f"{CONFIG_CHANGES}/{CHANGE_PREFIX}"


def encode_change(topic: str) -> bytes:
    """A change node's value: the topic's name as a JSON string (as Kafka 0.8.1)."""
    return json.dumps(topic).encode()


class OtherEntityChange(ValueError):
    """A change node of another entity than a topic (a user's quotas, Kafka's
    ``{"version":2,"entity_path":"users/..."}``: hostbroker/cluster/acls_zk.py)."""


def decode_change(data: bytes, path: str, bounds: Bounds = DEFAULT) -> str:
    """The topic a change node names; ValueError (one line naming ``path``) for a
    value too long, not a JSON string, or not a topic name."""
    check_size(data, path, bounds)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    if text.startswith('{"version":2,"entity_path":"users/') and not nested_deeper(text, 1):
        raise OtherEntityChange(f"{path}: a user's quotas changed")
    if nested_deeper(text, 0):  # a string holds no bracket outside itself
        raise ValueError(f"{path}: not a topic name")
    try:
        topic = json.loads(text)
    except ValueError:
        raise ValueError(f"{path}: not JSON") from None
    if not isinstance(topic, str) or not name_ok(topic) or topic in (".", ".."):
        raise ValueError(f"{path}: {str(topic)[:80]!r} is not a topic name")
    return topic


def changed_config(current: Mapping[str, str], set_configs: Mapping[str, str],
                   delete_configs: Sequence[str]) -> dict[str, str]:
    """The topic's config after ``set_configs`` and ``delete_configs`` (a key deleted
    that is not set is no change; ValueError naming a key both set and deleted)."""
    both = sorted(set(set_configs) & set(delete_configs))
    if both:
        raise ValueError(f"{both[0]} is both set and deleted")
    out = {k: v for k, v in current.items() if k not in delete_configs}
    out.update(set_configs)
    return out


def added_replicas(assignment: Mapping[int, Sequence[int]], brokers: Sequence[int],
                   count: int, rng: random.Random | None = None) -> dict[int, list[int]]:
    """Replicas for partitions ``len(assignment)`` .. ``count - 1`` of a topic, over
    the live ``brokers``, with the topic's replication factor (its partition 0's),
    continuing the round-robin from the broker that leads partition 0 (as Kafka
    adds partitions). ValueError naming the problem: ``count`` not above the
    partitions there are, or more replicas than live brokers."""
    have = len(assignment)
    if count <= have:
        raise ValueError(f"the topic has {have} partition{'s' if have != 1 else ''}; "
                         f"partitions only grow (asked for {count})")
    rf = replication_factor_of(assignment)
    ordered = sorted(brokers)
    first = assignment[0][0] if assignment.get(0) else None
    start = ordered.index(first) if first in ordered else None
    # assign_replicas places partition p's first replica at (p + start) mod n: the
    # start that puts partition 0 on its broker continues the same rotation
    return assign_replicas(ordered, count - have, rf, start=start, first_partition=have,
                           rng=rng)


def commit(client, topic: str, grown: tuple[Mapping[int, Sequence[int]],
                                             Mapping[int, Sequence[int]], int] | None,
           config: tuple[Mapping[str, str], int] | None) -> bool:
    """One ZooKeeper transaction (all of it or none of it): the assignment node
    rewritten with ``added`` partitions after the old ones, when ``grown`` is
    ``(assignment, added, version)``; ``/config/topics/[topic]`` set to the whole
    config and a sequential change node naming the topic, when ``config`` is
    ``(config, version)`` (version -1: the node is created). Every write is
    version-checked against the read it was built from. False when another
    writer came first (or the topic went): nothing was written, read again."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    txn = client.transaction()
    if grown is not None:
        assignment, added, version = grown
        whole = {p: list(r) for p, r in assignment.items()}
        for p, replicas in added.items():
            if p in whole or len(replicas) > MAX_REPLICAS:
                raise ValueError(f"partition {p} cannot be added")
            whole[p] = list(replicas)
        txn.set_data(replica_nodes.assignment_path(topic), replica_nodes.encode_assignment(whole),
                     version=version)
    if config is not None:
        values, version = config
        path = replica_nodes.topic_config_path(topic)
        data = replica_nodes.encode_topic_config(values)
        client.ensure_path(CONFIG_CHANGES)
        if version < 0:
            client.ensure_path(path.rsplit("/", 1)[0])
            txn.create(path, data)
        else:
            txn.set_data(path, data, version=version)
        txn.create(change_path_prefix(), encode_change(topic), sequence=True)
    failed = [r for r in txn.commit() if isinstance(r, Exception)]
    if any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in failed):
        return False
    if failed:
        raise failed[0]
    return True


def notify_config_change(client, topic: str) -> str:
    """The sequential change node naming ``topic``; returns its path."""
    return client.create(change_path_prefix(), encode_change(topic), sequence=True,
                         makepath=True)
