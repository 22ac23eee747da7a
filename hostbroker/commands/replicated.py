"""Replicated topics in ZooKeeper, for the commands: create, describe, delete.

The ZooKeeper side of ``topics create|describe|delete --zookeeper`` for
replicated topics (docs/cluster.md, "Replicated topics"), and what
``leaders`` and ``reassign`` read. Nothing here talks to a broker: a
replicated topic is created by writing its assignment (the controller gives
it leaders and tells the brokers), deleted by writing
``/admin/delete_topics/[topic]``, and described from its state nodes.
Every node is read through :mod:`hostbroker.cluster.replica_nodes` (bounded,
hostile); a node that does not decode is named on stderr and left out.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from hostbroker.cluster.controller_decisions import UNCLEAN
from hostbroker.exits import EXIT_BROKER, EXIT_OK, CommandError, usage_error

MIN_INSYNC = "min.insync.replicas"


@contextmanager
def zookeeper_client(zookeeper: str):
    """A kazoo client on ``zookeeper`` for one command (stopped after), or a command
    error: usage for a bad connect string, 1 when no server answers, and 1 for a
    ZooKeeper call that fails meanwhile (no access, connection lost), named in
    one line."""
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from hostbroker.cluster.zk import ZooKeeperUnavailable, make_client

    logging.getLogger("kazoo").setLevel(logging.ERROR)
    try:
        client = make_client(zookeeper, 10000, 6000, key="--zookeeper")
    except ZooKeeperUnavailable as exc:
        raise CommandError(str(exc)) from None
    try:
        yield client
    except (KazooException, KazooTimeoutError) as exc:
        raise CommandError(f"ZooKeeper at {zookeeper}: {type(exc).__name__}"
                           + (f": {exc}" if str(exc) else "")) from None
    finally:
        client.stop()
        client.close()


def _reporter(err: TextIO, command: str):
    def report(path: str, problem: str) -> None:
        print(f"hostbroker {command}: {problem}", file=err)
    return report


def _get(client, path: str, err: TextIO, command: str):
    from hostbroker.cluster import zkread

    return zkread.value(client, path, zkread.DEFAULT, _reporter(err, command))


def live_ids(client, err: TextIO, command: str) -> list[int]:
    from hostbroker.cluster import paths, zkread

    ids = []
    for name in zkread.children(client, paths.BROKER_IDS, zkread.DEFAULT,
                                _reporter(err, command)):
        if name.isascii() and name.isdigit() and len(name) <= 10:
            ids.append(int(name))
    return sorted(ids)


def assignment(client, topic: str, err: TextIO, command: str) -> dict[int, list[int]] | None:
    """The replicas of each partition of a replicated topic; None for a topic that is
    not replicated (a 0.7 topic, or none, or a name no ZooKeeper node can have)."""
    from hostbroker.cluster.zkread import name_ok
    from hostbroker.cluster import replica_nodes

    if not name_ok(topic) or topic in (".", ".."):
        return None
    path = replica_nodes.assignment_path(topic)
    found = _get(client, path, err, command)
    if found is None:
        return None
    try:
        return replica_nodes.decode_assignment(found[0], path)
    except ValueError as exc:
        print(f"hostbroker {command}: {exc}", file=err)
        return None


def replicated_topics(client, err: TextIO, command: str) -> dict[str, dict[int, list[int]]]:
    """Every replicated topic and its assignment."""
    from hostbroker.cluster import paths, zkread

    out = {}
    for topic in zkread.children(client, paths.BROKER_TOPICS, zkread.DEFAULT,
                                 _reporter(err, command)):
        if zkread.name_ok(topic):
            found = assignment(client, topic, err, command)
            if found is not None:
                out[topic] = found
    return out


@dataclass
class PartitionView:
    partition: int
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    def as_json(self) -> dict:
        return {"partition": self.partition, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "replicas": self.replicas, "isr": self.isr,
                "under_replicated": self.under_replicated}


def partitions(client, topic: str, parts: dict[int, list[int]], err: TextIO,
               command: str) -> list[PartitionView]:
    """What the state nodes say of each partition (no state yet: leader -1, ISR empty)."""
    from hostbroker.cluster import replica_nodes

    views = []
    for p, replicas in sorted(parts.items()):
        path = replica_nodes.state_path(topic, p)
        found = _get(client, path, err, command)
        leader, epoch, isr = -1, -1, []
        if found is not None:
            try:
                state = replica_nodes.decode_state(found[0], path)
                leader, epoch, isr = state.leader, state.leader_epoch, list(state.isr)
            except ValueError as exc:
                print(f"hostbroker {command}: {exc}", file=err)
        views.append(PartitionView(p, list(replicas), leader, epoch, isr))
    return views


def topic_config(client, topic: str, err: TextIO, command: str) -> dict[str, str] | None:
    """A replicated topic's overrides ({} without a node); None for a node that
    does not decode (named in one line on stderr)."""
    from hostbroker.cluster import replica_nodes

    path = replica_nodes.topic_config_path(topic)
    found = _get(client, path, err, command)
    if found is None:
        return {}
    try:
        return dict(replica_nodes.decode_topic_config(found[0], path))
    except ValueError as exc:
        print(f"hostbroker {command}: {exc}; overrides not shown", file=err)
        return None


def overrides_text(config: dict[str, str]) -> str:
    """``KEY=VALUE ...`` (sorted) for one line: a value read from outside that
    would break the line (a newline, a control character) is shown escaped."""
    def shown(text: str) -> str:
        return text if text.isprintable() else repr(text)[1:-1]

    return " ".join(f"{shown(k)}={shown(v)}" for k, v in sorted(config.items())) or "none"


# -- topics create / describe / delete ----------------------------------------------


def check_min_insync(configs: dict[str, str], replication_factor: int) -> None:
    value = configs.get(MIN_INSYNC)
    if value is None:
        return
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= replication_factor:
        raise usage_error(f"--config {MIN_INSYNC}={value}: must be a number from 1 to the "
                          f"replication factor ({replication_factor})")


def create(topic: str, partitions_count: int, replication_factor: int,
           configs: dict[str, str], *, zookeeper: str, out: TextIO, err: TextIO) -> int:
    """Write ``/config/topics/[topic]`` (when there are configs), then the assignment
    (Kafka's round-robin over the live brokers); the controller does the rest."""
    from kazoo.exceptions import NodeExistsError

    from hostbroker.cluster import replica_nodes
    from hostbroker.replication.assignment import assign_replicas

    if replication_factor < 1:
        raise usage_error(f"--replication-factor must be at least 1, not {replication_factor}")
    check_min_insync(configs, replication_factor)
    if UNCLEAN in configs and configs[UNCLEAN].strip().lower() not in ("true", "false"):
        raise usage_error(f"--config {UNCLEAN}={configs[UNCLEAN]}: must be true or false")
    with zookeeper_client(zookeeper) as client:
        if client.exists(replica_nodes.delete_topic_path(topic)) is not None:
            raise CommandError(f"topic {topic} is marked for deletion; create it again once "
                               "the controller has deleted every replica")
        if client.exists(replica_nodes.assignment_path(topic)) is not None:
            raise CommandError(f"topic {topic} already exists in ZooKeeper")
        brokers = live_ids(client, err, "topics create")
        if not brokers:
            raise CommandError(f"no live broker is registered in ZooKeeper at {zookeeper}")
        try:
            replicas = assign_replicas(brokers, partitions_count, replication_factor)
        except ValueError as exc:
            raise CommandError(f"cannot place topic {topic}: {exc}") from None
        config_path = replica_nodes.topic_config_path(topic)
        data = replica_nodes.encode_topic_config(configs)
        if client.exists(config_path) is None:
            try:
                client.create(config_path, data, makepath=True)
            except NodeExistsError:
                client.set(config_path, data)
        else:
            client.set(config_path, data)
        try:
            client.create(replica_nodes.assignment_path(topic),
                          replica_nodes.encode_assignment(replicas),
                          makepath=True)
        except NodeExistsError:
            raise CommandError(f"topic {topic} already exists in ZooKeeper") from None
    suffix = "".join(f" {key}={value}" for key, value in configs.items())
    print(f"created topic {topic} with {partitions_count} partition"
          f"{'s' if partitions_count != 1 else ''}, replication factor {replication_factor}"
          f"{suffix}", file=out)
    return EXIT_OK


def describe(client, topics: dict[str, dict[int, list[int]]], *, as_json: bool, out: TextIO,
             err: TextIO) -> list[dict]:
    """Print the replicated ``topics`` (table), or return their JSON documents; a
    topic whose deletion is pending is marked so."""
    from hostbroker.cluster import replica_nodes

    documents = []
    for topic in sorted(topics):
        views = partitions(client, topic, topics[topic], err, "topics describe")
        config = topic_config(client, topic, err, "topics describe")
        factor = max((len(v.replicas) for v in views), default=0)
        deleting = client.exists(replica_nodes.delete_topic_path(topic)) is not None
        if as_json:
            documents.append({"topic": topic, "replication_factor": factor, "config": config,
                              "marked_for_deletion": deleting,
                              "partitions": [v.as_json() for v in views]})
            continue
        under = sum(v.under_replicated for v in views)
        print(f"topic: {topic}  partitions: {len(views)}  replication factor: {factor}"
              + (f"  under-replicated: {under}" if under else "")
              + ("  (marked for deletion)" if deleting else ""), file=out)
        if config:  # as standalone describe shows a topic's overrides
            print(f"  config: {overrides_text(config)}", file=out)
        rows = [("partition", "leader", "epoch", "replicas", "isr", "")]
        for v in views:
            rows.append((str(v.partition), str(v.leader) if v.leader >= 0 else "none",
                         str(v.leader_epoch), ",".join(map(str, v.replicas)),
                         ",".join(map(str, v.isr)),
                         "under-replicated" if v.under_replicated else ""))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
    return documents


def delete(topic: str, *, zookeeper: str, out: TextIO, err: TextIO) -> int | None:
    """Ask the controller to delete a replicated topic; None when ``topic`` is not a
    replicated topic (the caller deletes it the 0.7 way)."""
    from kazoo.exceptions import NodeExistsError

    from hostbroker.cluster import replica_nodes

    with zookeeper_client(zookeeper) as client:
        if assignment(client, topic, err, "topics delete") is None:
            return None
        try:
            client.create(f"{replica_nodes.DELETE_TOPICS}/{topic}", b"", makepath=True)
        except NodeExistsError:
            pass
    print(f"topic {topic} marked for deletion (the controller removes its replicas)", file=out)
    return EXIT_OK


def create_request(client, data: bytes, decode, path: str, too_long: str, busy: str) -> None:
    """Write the admin request node ``path`` holding ``data``, once the controller
    would read it (``decode`` under the default bounds); else a one-line error
    that ends with ``too_long`` (what to do instead). One already there is the
    one-line error "``busy`` is already in progress"."""
    from kazoo.exceptions import NodeExistsError

    from hostbroker.cluster import zkread

    try:
        zkread.check_size(data, path, zkread.DEFAULT)
        decode(data, path, zkread.DEFAULT)
    except ValueError as exc:
        raise CommandError(f"{exc}; {too_long}") from None
    try:
        client.create(path, data, makepath=True)
    except NodeExistsError:
        raise CommandError(f"{busy} is already in progress ({path} exists)") from None


def read_json_file(path: str, option: str, limit: int = 16 << 20) -> dict:
    """A JSON object from a file given by ``option``; usage errors in one line."""
    from hostbroker.cluster.zkread import MAX_JSON_DEPTH, nested_deeper

    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise usage_error(f"{option}: {exc.strerror or exc}: {path}") from None
    if len(data) > limit:
        raise usage_error(f"{option}: {path} is longer than {limit} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise usage_error(f"{option}: {path} is not UTF-8 text") from None
    if nested_deeper(text, MAX_JSON_DEPTH + 1):
        raise usage_error(f"{option}: {path} nests JSON too deep")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise usage_error(f"{option}: {path} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise usage_error(f"{option}: {path} is not a JSON object")
    return value


def status_of(problems: int) -> int:
    return EXIT_BROKER if problems else EXIT_OK

