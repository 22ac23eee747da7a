"""``hostbroker topics create|list|describe|alter|delete``: topic admin over the wire.

Each subcommand is one request through :class:`SimpleClient` (CREATE_TOPIC,
METADATA, ALTER_TOPIC, DELETE_TOPIC). Topic configs given to ``create`` and
``alter`` are checked here with the broker's own rules
(:class:`hostbroker.log.config.LogConfig`) before any connection is made, so
a typo is a usage error, not a broker error.

``alter`` changes a topic on the running broker (ALTER_TOPIC): more
partitions (never fewer: the broker refuses in one line), configs set
(``--config``) or deleted (``--delete-config``, back to the broker's
default), checked whole first (the same change again completes one that
failed part-way); with ``--zookeeper`` it is
:func:`hostbroker.commands.topics_alter_zk.alter_cluster`'s.

``describe`` prints, per partition, what METADATA says: the broker serving
it, the log start and end offsets, the log dir and the partition's error;
and from METADATA version 2 (where the broker has it) each replica's log dir,
the ISR and the leader epoch; and each topic's config overrides
(DESCRIBE_TOPIC_CONFIGS: a ``config:`` line, the JSON key ``config``).
``--json`` keeps its list of topics; the broker's log dirs are ``hostbroker
logdirs list --json``'s.

On a standalone broker, ``create --replication-factor R`` (CREATE_TOPIC
version 1) asks the broker to place R replicas of each partition on R
distinct log dirs (docs/storage.md, "Replicas across log dirs"); the broker
places them and refuses in one line what it cannot place. ``describe`` names
those replicas by their dirs' paths (:mod:`hostbroker.commands.logdirs`).

With ``--zookeeper`` (cluster mode, docs/cluster.md) the live brokers are
read from ZooKeeper (``/brokers/ids``) and every command goes to each of
them through its registered listeners: ``create`` makes the topic's N
partitions on every live broker (per-broker partition counts, as in the
original design), ``delete`` removes it from each broker holding it, and
``list`` / ``describe`` show the whole cluster from each broker's METADATA
(``describe`` with each topic's overrides: hostbroker/commands/topics_describe_zk.py).
A broker that cannot be reached or refuses is named on stderr and makes the
exit status 1; the others are still served.

Replicated topics (``create --replication-factor R``; docs/cluster.md,
"Replicated topics") live in ZooKeeper, not on the brokers one by one:
``create`` writes the assignment, ``delete`` asks the controller, and
``describe`` shows each partition's leader, replicas and ISR from the state
nodes (hostbroker/commands/replicated.py). ``list`` and ``describe`` show
both kinds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TextIO

from hostbroker.commands import DEFAULT_BOOTSTRAP, check_bootstrap, key_values
from hostbroker.commands.brokers import each_broker, live_brokers, on_brokers
from hostbroker.commands import topics_shown as shown
from hostbroker.exits import EXIT_BROKER, EXIT_OK, CommandError, plural, usage_error

def _client(bootstrap: str):
    from hostbroker.client.simple import SimpleClient

    return SimpleClient(check_bootstrap(bootstrap), client_id="hostbroker-topics")


def _create_args(topic: str, partitions: int, configs: Iterable[str],
                 replicated: bool = False) -> dict[str, str]:
    """The topic configs of a ``create``, after checking every argument (usage errors);
    ``min.insync.replicas`` only for a replicated topic."""
    from hostbroker.log.config import LogConfig
    from hostbroker.errors import InvalidTopicError
    from hostbroker.log.segments import validate_topic_name

    try:
        validate_topic_name(topic)
    except InvalidTopicError as exc:
        raise usage_error(str(exc)) from None
    if partitions < 1:
        raise usage_error(f"--partitions must be at least 1, not {partitions}")
    configs = key_values("--config", configs)
    from hostbroker.commands.replicated import MIN_INSYNC, UNCLEAN

    LogConfig().with_overrides({k: v for k, v in configs.items()
                                if not (replicated and k in (MIN_INSYNC, UNCLEAN))})
    return configs


def _created(topic: str, partitions: int, configs: dict[str, str], where: str = "") -> str:
    suffix = "".join(f" {key}={value}" for key, value in configs.items())
    return (f"created topic {topic} with {partitions} partition"
            f"{'s' if partitions != 1 else ''}{where}{suffix}")


def create(topic: str, partitions: int, configs: Iterable[str] = (), *,
           bootstrap: str = DEFAULT_BOOTSTRAP, replication_factor: int | None = None,
           out: TextIO = sys.stdout) -> int:
    """Create ``topic`` with ``partitions`` partitions and ``configs`` (``KEY=VALUE``)
    overrides; with a ``replication_factor``, its replicas on that many distinct
    log dirs of the broker (CREATE_TOPIC version 1)."""
    if replication_factor is None:
        configs = _create_args(topic, partitions, configs)
        with _client(bootstrap) as client:
            client.create_topic(topic, partitions, configs)
        print(_created(topic, partitions, configs), file=out)
        return EXIT_OK
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode
    from hostbroker.replication import MAX_REPLICAS

    if not 1 <= replication_factor <= MAX_REPLICAS:
        raise usage_error(f"--replication-factor must be 1 to {MAX_REPLICAS}")
    configs = _create_args(topic, partitions, configs, replicated=True)
    with _client(bootstrap) as client:
        try:
            client.create_topic(topic, partitions, configs,
                                replication_factor=replication_factor)
        except BrokerError as exc:
            if exc.code == ErrorCode.UNSUPPORTED_VERSION and exc.topic is None:
                raise CommandError("the broker does not support --replication-factor") \
                    from None
            raise
    print(_created(topic, partitions, configs,
                   f", replication factor {replication_factor}"), file=out)
    return EXIT_OK


def _alter_args(topic: str, partitions: int | None, configs: Iterable[str],
                delete_configs: Iterable[str],
                check_keys: bool = True) -> tuple[dict[str, str], list[str]]:
    """The configs to set and delete of an ``alter``, after checking every
    argument (usage errors): a legal name, a positive partition count, known
    keys with valid values (unless ``check_keys`` is false: a cluster's
    replicated topic has keys of its own, checked where they are known),
    something to change."""
    from hostbroker.commands import check_topic
    from hostbroker.log.config import TOPIC_CONFIG_KEYS, LogConfig

    check_topic(topic)
    if partitions is not None and partitions < 1:
        raise usage_error(f"--partitions must be at least 1, not {partitions}")
    sets = key_values("--config", configs)
    if check_keys:
        LogConfig().with_overrides(sets)  # ConfigError: one line naming the key, status 2
    deletes = list(dict.fromkeys(delete_configs or ()))
    for key in deletes:
        if check_keys and key not in TOPIC_CONFIG_KEYS:
            raise usage_error(f"--delete-config {key}: unknown topic config key (one of "
                              f"{', '.join(TOPIC_CONFIG_KEYS)})")
        if key in sets:
            raise usage_error(f"{key}: both --config and --delete-config")
    if partitions is None and not sets and not deletes:
        raise usage_error("nothing to change: give --partitions, --config or --delete-config")
    return sets, deletes


def _altered(topic: str, partitions: int | None, sets: dict[str, str],
             deletes: list[str]) -> str:
    said = [f"{plural(partitions, 'partition')}"] if partitions is not None else []
    said += [f"{key}={value}" for key, value in sets.items()]
    said += [f"{key} deleted" for key in deletes]
    return f"altered topic {topic}: {', '.join(said)}"


def alter(topic: str, partitions: int | None = None, configs: Iterable[str] = (),
          delete_configs: Iterable[str] = (), *, bootstrap: str = DEFAULT_BOOTSTRAP,
          out: TextIO = sys.stdout) -> int:
    """Grow ``topic`` to ``partitions`` (None: unchanged), set ``configs``
    (``KEY=VALUE``) and delete ``delete_configs`` on the running broker (ALTER_TOPIC)."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.errors import ErrorCode

    sets, deletes = _alter_args(topic, partitions, configs, delete_configs)
    with _client(bootstrap) as client:
        try:
            client.alter_topic(topic, partitions=partitions, set_configs=sets,
                               delete_configs=deletes)
        except BrokerError as exc:
            if exc.code == ErrorCode.UNSUPPORTED_VERSION and exc.topic is None:
                raise CommandError("the broker cannot change topics (no ALTER_TOPIC)") \
                    from None
            raise
    print(_altered(topic, partitions, sets, deletes), file=out)
    return EXIT_OK


def alter_cluster(topic: str, partitions: int | None = None, configs: Iterable[str] = (),
                  delete_configs: Iterable[str] = (), *, zookeeper: str,
                  out: TextIO = sys.stdout) -> int:
    """``alter --zookeeper``: the arguments parsed here, then checked and done
    through ZooKeeper (:mod:`hostbroker.commands.topics_alter_zk`)."""

    sets, deletes = _alter_args(topic, partitions, configs, delete_configs, check_keys=False)
    try:
        from hostbroker.commands.topics_alter_zk import alter_cluster as on_zookeeper
    except ModuleNotFoundError as exc:
        if exc.name != "hostbroker.commands.topics_alter_zk":
            raise
        raise CommandError("changing a cluster's topics through ZooKeeper is not "
                           "available: alter each broker's plain topic with --bootstrap") \
            from None
    return on_zookeeper(zookeeper, topic, partitions, sets, deletes, out)


def delete(topic: str, *, bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout) -> int:
    """Delete ``topic`` and its data."""
    with _client(bootstrap) as client:
        client.delete_topic(topic)
    print(f"deleted topic {topic}", file=out)
    return EXIT_OK


def list_topics(*, bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout) -> int:
    """Print every topic name, one a line, sorted."""
    with _client(bootstrap) as client:
        response = client.metadata()
    for name in sorted(t.topic for t in response.topics):
        print(name, file=out)
    return EXIT_OK


class _Replicas:
    """Each partition's replicas by log dir (METADATA v2), named by path; a
    broker that does not answer version 2 (or a partition its answer lacks)
    shows a partition as one replica in its ``log_dir``."""

    def __init__(self, response):
        from hostbroker.commands.logdirs import DirNames

        self.names = DirNames.from_response(response) if response is not None else DirNames(())
        self.parts = {}
        for topic in response.topics if response is not None else ():
            for p in topic.partitions:
                self.parts[(topic.topic, p.partition)] = p

    def of(self, topic: str, p) -> dict:
        """The replica fields ``describe`` adds to partition ``p`` (a METADATA v0 row)."""
        from hostbroker.commands.logdirs import partition_is_short

        found = self.parts.get((topic, p.partition))
        if found is None or not found.replica_dirs:  # (or its dir's id is not known)
            plain = [p.log_dir] if p.log_dir else []
            return {"leader": p.log_dir, "replicas": plain, "isr": plain, "leader_epoch": -1,
                    "under_replicated": False}
        fields = {"leader": self.names.name(found.leader_dir) if found.leader_dir >= 0 else None,
                  "replicas": self.names.names(found.replica_dirs),
                  "isr": self.names.names(found.isr_dirs),
                  "leader_epoch": found.leader_epoch,
                  "under_replicated": partition_is_short(found)}
        if found.target_dirs:
            fields["target"] = self.names.names(found.target_dirs)
        return fields

    def spread(self, topic) -> bool:
        """Whether a partition of ``topic`` has replicas on more than one log dir."""
        return any(len(self.of(topic.topic, p)["replicas"]) > 1 or "target" in self.of(
            topic.topic, p) for p in topic.partitions)


# a topic with replicas on several log dirs: the leader's dir, then every replica's
_REPLICA_COLUMNS = (*shown.COLUMNS[:5], "leader", "replicas", "isr", "error", "")


def _replica_rows(topic, replicas: _Replicas) -> list[tuple[str, ...]]:
    rows = []
    for row, p in zip(shown.rows(topic), sorted(topic.partitions, key=lambda p: p.partition)):
        fields = replicas.of(topic.topic, p)
        mark = "under-replicated" if fields["under_replicated"] else ""
        if "target" in fields:
            mark = ("moving to " + ",".join(fields["target"]) + " " + mark).strip()
        rows.append((*row[:5], fields["leader"] or "none", ",".join(fields["replicas"]),
                     ",".join(fields["isr"]), row[6], mark))
    return rows


def describe(topics: list[str], *, as_json: bool = False, bootstrap: str = DEFAULT_BOOTSTRAP,
             out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Describe ``topics`` (every topic when empty), partition by partition: the
    broker's METADATA (version 0: offsets and the serving log dir) joined with
    version 2 (each replica's log dir, the ISR, the leader epoch).

    ``--json`` prints today's list of topics, each partition with the keys
    version 2 adds. A broker that does not know version 2 (an older one)
    holds plain partitions only, each one replica in its ``log_dir``. When
    version 2 fails otherwise, the topics are described from version 0 alone,
    without the replica keys, and one line on stderr says why (the status
    stays what version 0's answer gives).

    A topic the broker does not know is named on stderr and makes the exit
    status 1; the others are still described.
    """
    from hostbroker.commands import describe_error
    from hostbroker.commands.logdirs import metadata_v2
    from hostbroker.errors import ErrorCode, HostbrokerError

    with _client(bootstrap) as client:
        response = client.metadata(topics)
        try:
            # (None, from a broker without version 2: every partition is plain)
            replicas = _Replicas(metadata_v2(client, topics))
        except (HostbrokerError, OSError) as exc:
            # version 2 answers about twice version 0's bytes: it can pass
            # response.max.bytes where version 0 does not
            print(f"hostbroker topics describe: replicas not shown: "
                  f"{describe_error(exc, bootstrap)[0]}", file=err)
            replicas = None
        configs = _topic_configs(client, topics, bootstrap, err)
    status = EXIT_OK
    found = []
    for topic in sorted(response.topics, key=lambda t: t.topic):
        if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            print(f"hostbroker topics describe: no topic {topic.topic}", file=err)
            status = EXIT_BROKER
            continue
        found.append(topic)
    if as_json:
        documents = []
        for topic in found:
            document = shown.as_json(topic)
            if configs is not None:
                document["config"] = configs.get(topic.topic, {})
            for p, row in zip(sorted(topic.partitions, key=lambda p: p.partition),
                              document["partitions"]):
                if replicas is not None:
                    row.update(replicas.of(topic.topic, p))
            documents.append(document)
        print(json.dumps(documents, indent=2), file=out)
        return status
    for topic in found:
        error = ("" if topic.error_code == ErrorCode.NONE
                 else f"  error: {shown.error_name(topic.error_code)}")
        overrides = (configs or {}).get(topic.topic)
        config = ("  config: " + " ".join(f"{k}={v}" for k, v in overrides.items())
                  if overrides else "")
        if replicas is None or not replicas.spread(topic):
            print(f"topic: {topic.topic}  partitions: {len(topic.partitions)}{error}", file=out)
            if config:
                print(config, file=out)
            shown.table(shown.rows(topic), out)
            continue
        rows = _replica_rows(topic, replicas)
        fields = [replicas.of(topic.topic, p) for p in topic.partitions]
        factor = max(len(f["replicas"]) for f in fields)
        short = sum(f["under_replicated"] for f in fields)
        print(f"topic: {topic.topic}  partitions: {len(topic.partitions)}  replication factor: "
              f"{factor}" + (f"  under-replicated: {short}" if short else "") + error, file=out)
        if config:
            print(config, file=out)
        shown.table(rows, out, _REPLICA_COLUMNS)
    return status


def _topic_configs(client, topics: list[str], bootstrap: str,
                   err: TextIO) -> dict[str, dict[str, str]] | None:
    """topic -> its config overrides (DESCRIBE_TOPIC_CONFIGS); None, with one
    line on stderr, when the broker cannot say (an older one, or an answer
    too large)."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.commands import describe_error
    from hostbroker.errors import ErrorCode, HostbrokerError

    try:
        found = client.describe_topic_configs(topics)
    except BrokerError as exc:
        if exc.code == ErrorCode.UNSUPPORTED_VERSION:
            return None  # a broker before topic configs could be read: nothing to say
        print(f"hostbroker topics describe: configs not shown: "
              f"{describe_error(exc, bootstrap)[0]}", file=err)
        return None
    except (HostbrokerError, OSError) as exc:
        print(f"hostbroker topics describe: configs not shown: "
              f"{describe_error(exc, bootstrap)[0]}", file=err)
        return None
    return {t.topic: {e.key: e.value for e in t.configs} for t in found
            if t.error_code == ErrorCode.NONE}


# -- cluster mode: every live broker registered in ZooKeeper --------------------


def create_cluster(topic: str, partitions: int, configs: Iterable[str] = (), *,
                   zookeeper: str, replication_factor: int | None = None,
                   out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Create ``topic`` with ``partitions`` partitions on every live broker; with a
    ``replication_factor``, a replicated topic of ``partitions`` partitions in all."""
    from hostbroker.commands import replicated

    configs = _create_args(topic, partitions, configs, replication_factor is not None)
    if replication_factor is not None:
        return replicated.create(topic, partitions, replication_factor, configs,
                                 zookeeper=zookeeper, out=out, err=err)
    brokers = live_brokers(zookeeper)
    done, status = each_broker(
        "create", brokers, lambda info, c: c.create_topic(topic, partitions, configs), err)
    if done:
        print(_created(topic, partitions, configs, on_brokers(done)), file=out)
    return status


def delete_cluster(topic: str, *, zookeeper: str, out: TextIO = sys.stdout,
                   err: TextIO = sys.stderr) -> int:
    """Delete ``topic`` from every live broker that holds it."""
    from hostbroker.client.errors import BrokerError
    from hostbroker.commands import replicated
    from hostbroker.errors import ErrorCode

    marked = replicated.delete(topic, zookeeper=zookeeper, out=out, err=err)
    if marked is not None:
        return marked

    def work(info, client):
        response = client.delete_topic(topic, raise_on_error=False)
        if response.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return False
        if response.error_code != ErrorCode.NONE:
            raise BrokerError(response.error_code, response.error_message or "")
        return True

    results, status = each_broker("delete", live_brokers(zookeeper), work, err)
    deleted = [b for b, held in results.items() if held]
    if deleted:
        print(f"deleted topic {topic}{on_brokers(deleted)}", file=out)
    elif status == EXIT_OK:
        raise CommandError(f"no live broker holds topic {topic}")
    return status


def _metadata(name: str, brokers, topics: list[str], err: TextIO):
    return each_broker(name, brokers, lambda info, c: c.metadata(topics), err)


def list_cluster(*, zookeeper: str, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Print every topic of any live broker, and every replicated topic, one a line,
    sorted."""
    from hostbroker.commands import replicated

    with replicated.zookeeper_client(zookeeper) as client:
        names = set(replicated.replicated_topics(client, err, "topics list"))
    answers, status = _metadata("list", live_brokers(zookeeper), [], err)
    for name in sorted(names | {t.topic for r in answers.values() for t in r.topics}):
        print(name, file=out)
    return status


def describe_cluster(topics: list[str], *, as_json: bool = False, zookeeper: str,
                     out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """The live brokers, then ``topics`` (every topic when empty) over the whole
    cluster, both kinds with their config overrides
    (:mod:`hostbroker.commands.topics_describe_zk`)."""
    from hostbroker.commands.topics_describe_zk import describe_cluster as on_cluster

    return on_cluster(topics, as_json=as_json, zookeeper=zookeeper, out=out, err=err)
