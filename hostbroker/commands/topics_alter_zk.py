"""``hostbroker topics alter --zookeeper``: a topic changed on a running cluster.

A replicated topic (docs/cluster.md, "Changing a replicated topic") is
changed in ZooKeeper only, as Kafka 0.8.1's tools do; nothing is sent to a
broker:

- ``--config K=V`` / ``--delete-config K``: ``/config/topics/[topic]``
  rewritten whole (version-checked against the read it was built from; one
  too long or garbage is replaced whole, said on stderr) and a sequential
  ``/config/changes/config_change_N`` naming the topic; the
  controller reads the config again and tells every replica, whose writers
  take it without a restart (a key deleted is removed on every replica).
- ``--partitions N``: the assignment node rewritten with the old partitions
  as they are and replicas for the new ones (Kafka's round-robin, continued
  from the broker of partition 0, the topic's replication factor); the
  controller watches the node and gives the new partitions leaders at once.
  Fewer partitions than now is refused in one line.

Both are one ZooKeeper transaction (``topic_changes.commit``), written after
everything is read and checked: a grow that fails (the topic gone, too few
live brokers, a race lost five times) leaves the config unchanged too.

A 0.7-style topic (per-broker partitions, docs/cluster.md "Brokers") is
changed on each live broker that holds it, with the ALTER_TOPIC request
``--bootstrap`` sends to one broker (``--partitions N``: N partitions on
each of them, as ``topics create --zookeeper`` made them). A broker that
cannot be reached or refuses is named on stderr and makes the status 1.
Such a topic's partitions and configs are each broker's, as in Kafka 0.7:
``--bootstrap`` (:func:`hostbroker.commands.topics.alter`) changes the one
broker it reaches; a broker already at the count or config asked is left as
it is here, so running this again brings every broker in step.

Everything is checked before anything is written: the keys and values with
the brokers' own rules (:class:`hostbroker.log.config.LogConfig`), the
partition count against what ZooKeeper readers take
(``zookeeper.max.partitions.per.registration``).
"""

from __future__ import annotations

import sys
from typing import TextIO

from hostbroker.exits import EXIT_OK, CommandError, usage_error

_COMMAND = "topics alter"
_RETRIES = 5  # version-checked writes that lost a race, read and built again


def _check_args(topic: str, partitions: int | None, set_configs: dict[str, str],
                delete_configs: list[str]) -> None:
    from hostbroker.errors import InvalidTopicError
    from hostbroker.log.segments import validate_topic_name

    try:
        validate_topic_name(topic)
    except InvalidTopicError as exc:
        raise usage_error(str(exc)) from None
    if partitions is None and not set_configs and not delete_configs:
        raise usage_error("nothing to change: give --partitions, --config or --delete-config")
    if partitions is not None and partitions < 1:
        raise usage_error(f"--partitions must be at least 1, not {partitions}")
    both = sorted(set(set_configs) & set(delete_configs))
    if both:
        raise usage_error(f"--config and --delete-config both name {both[0]}")


def _what(partitions: tuple[int, int] | None, set_configs: dict[str, str],
          delete_configs: list[str]) -> str:
    parts = []
    if partitions is not None:
        parts.append(f"partitions {partitions[0]} -> {partitions[1]}")
    parts.extend(f"{k}={v}" for k, v in sorted(set_configs.items()))
    parts.extend(f"{k} deleted" for k in sorted(delete_configs))
    return ", ".join(parts)


def alter_cluster(zookeeper: str, topic: str, partitions: int | None,
                  set_configs: dict[str, str], delete_configs: list[str],
                  out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Change ``topic`` on the cluster at ``zookeeper``: grow it to ``partitions``
    (None: unchanged), set ``set_configs`` and delete ``delete_configs``. Returns
    the exit status; usage errors and one-line command errors are raised."""
    from hostbroker.commands import replicated

    set_configs, delete_configs = dict(set_configs), list(dict.fromkeys(delete_configs))
    _check_args(topic, partitions, set_configs, delete_configs)
    with replicated.zookeeper_client(zookeeper) as client:
        _readable_assignment(client, topic)
        assignment = replicated.assignment(client, topic, err, _COMMAND)
        if assignment is not None:
            return _alter_replicated(client, zookeeper, topic, assignment, partitions,
                                     set_configs, delete_configs, out, err)
    return _alter_plain(zookeeper, topic, partitions, set_configs, delete_configs, out, err)


# -- a replicated topic: ZooKeeper only ---------------------------------------------


def _readable_assignment(client, topic: str) -> None:
    """A topic node too long to read is said as such (one line), not taken for a
    topic that is not replicated."""
    from hostbroker.cluster import zkread
    from hostbroker.cluster import replica_nodes

    if not zkread.name_ok(topic) or topic in (".", ".."):
        return
    path = replica_nodes.assignment_path(topic)
    found = zkread.unchecked(client, path)
    if found is not None:
        try:
            zkread.check_size(found[0], path, zkread.DEFAULT)
        except ValueError as exc:
            raise CommandError(f"{exc}; nothing changed") from None


def _alter_replicated(client, zookeeper: str, topic: str, assignment, partitions,
                      set_configs, delete_configs, out: TextIO, err: TextIO) -> int:
    """Everything read and checked, then written in one ZooKeeper transaction: a
    failure (or a race lost ``_RETRIES`` times) changes nothing."""
    from hostbroker.cluster import zkread
    from hostbroker.cluster.topic_changes import commit
    from hostbroker.cluster import replica_nodes

    if client.exists(replica_nodes.delete_topic_path(topic)) is not None:
        raise CommandError(f"topic {topic} is marked for deletion")
    have = len(assignment)
    if partitions is not None:
        if partitions < have:
            raise CommandError(f"topic {topic} has {have} partitions; partitions only grow "
                               f"(asked for {partitions})")
        limit = zkread.DEFAULT.partitions_per_registration
        if partitions > limit:
            raise CommandError(f"--partitions {partitions} is over "
                               f"zookeeper.max.partitions.per.registration ({limit})")
        if partitions == have and not set_configs and not delete_configs:
            raise CommandError(f"topic {topic} already has {have} partitions")
    factor = max(len(r) for r in assignment.values())
    growing = partitions is not None and partitions > have
    for _ in range(_RETRIES):
        config = (_config(client, topic, factor, set_configs, delete_configs, err)
                  if set_configs or delete_configs else None)  # a usage error first
        grown = _grown(client, topic, partitions, err) if growing else None
        if (grown is None and config is None) or commit(client, topic, grown, config):
            break
    else:
        raise CommandError(f"topic {topic}'s nodes keep changing; try again (nothing was "
                           "changed)")
    done = (have, partitions) if growing else None
    print(f"altered topic {topic}: {_what(done, set_configs, delete_configs)}", file=out)
    return EXIT_OK


def _config(client, topic: str, factor: int, set_configs: dict[str, str],
            delete_configs: list[str], err: TextIO) -> tuple[dict[str, str], int]:
    """The topic's whole config after the change, and the version of the config node
    it was built from (-1: none). A node that cannot be read (too long, garbage) is
    replaced whole by what is asked (said on ``err``), checked against its version."""
    from hostbroker.cluster import zkread
    from hostbroker.cluster.controller_topics import checked_config
    from hostbroker.cluster.topic_changes import changed_config
    from hostbroker.cluster import replica_nodes

    path = replica_nodes.topic_config_path(topic)
    found = zkread.unchecked(client, path)
    current, version = {}, -1
    if found is not None:
        version = found[1].version
        try:
            zkread.check_size(found[0], path, zkread.DEFAULT)
            current = replica_nodes.decode_topic_config(found[0], path)
        except ValueError as exc:
            print(f"hostbroker {_COMMAND}: {exc}; replaced whole by the config asked",
                  file=err)
    try:
        config = changed_config(current, set_configs, delete_configs)
    except ValueError as exc:
        raise CommandError(f"topic {topic}: {exc}") from None
    problem = checked_config(config, factor)
    if problem is not None:
        raise usage_error(f"--config {problem}")
    if len(config) > replica_nodes.MAX_TOPIC_CONFIGS:
        raise usage_error(f"more than {replica_nodes.MAX_TOPIC_CONFIGS} config overrides")
    return config, version


def _grown(client, topic: str, partitions: int, err: TextIO):
    """(assignment, added, version) for the assignment grown to ``partitions``;
    None when it already has them (grown meanwhile by another)."""
    from hostbroker.cluster import zkread
    from hostbroker.cluster.topic_changes import added_replicas
    from hostbroker.commands import replicated
    from hostbroker.cluster import replica_nodes

    path = replica_nodes.assignment_path(topic)
    found = zkread.unchecked(client, path)
    if found is None:
        raise CommandError(f"topic {topic} is gone")
    try:
        zkread.check_size(found[0], path, zkread.DEFAULT)
        assignment = replica_nodes.decode_assignment(found[0], path)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if assignment is None:
        raise CommandError(f"topic {topic} is no longer a replicated topic")
    if partitions <= len(assignment):
        return None
    live = replicated.live_ids(client, err, _COMMAND)
    try:
        added = added_replicas(assignment, live, partitions)
    except ValueError as exc:
        raise CommandError(f"cannot add partitions to {topic}: {exc}") from None
    return assignment, added, found[1].version


# -- a 0.7-style topic: each broker that holds it ---------------------------------------


def _alter_plain(zookeeper: str, topic: str, partitions, set_configs, delete_configs,
                 out: TextIO, err: TextIO) -> int:
    from hostbroker.client.errors import BrokerError
    from hostbroker.commands.brokers import each_broker, live_brokers, on_brokers
    from hostbroker.errors import ErrorCode

    def work(info, client):
        response = client.alter_topic(topic, partitions=partitions, set_configs=set_configs,
                                      delete_configs=delete_configs, raise_on_error=False)
        if response.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return False
        if response.error_code != ErrorCode.NONE:
            raise BrokerError(response.error_code, response.error_message or "")
        return True

    results, status = each_broker("alter", live_brokers(zookeeper), work, err)
    altered = [b for b, held in results.items() if held]
    if altered:
        what = _what(None, set_configs, delete_configs)
        if partitions is not None:
            what = ", ".join(x for x in (f"{partitions} partitions on each", what) if x)
        print(f"altered topic {topic}{on_brokers(altered)}: {what}", file=out)
    elif status == EXIT_OK:
        raise CommandError(f"no topic {topic}")
    return status
