"""The replication nodes of ZooKeeper (docs/spec/zookeeper.md, "Replication"):
their paths, and their values to bytes and back.

Pure: bytes in, values out. Every value is UTF-8 JSON (or a decimal number)::

    /brokers/topics/[topic]                         {"version":1,"partitions":{"0":[1,2],...}}
    /brokers/topics/[topic]/partitions/[p]/state    {"version":1,"leader":L,"leader_epoch":E,
                                                     "isr":[ids],"controller_epoch":C}
    /config/topics/[topic]                          {"version":1,"config":{"k":"v"}}
    /controller                   (ephemeral)       {"version":1,"brokerid":N,"timestamp":"ms"}
    /controller_epoch                               "<int>" (decimal)
    /admin/delete_topics/[topic]                    (no value)
    /admin/preferred_replica_election               {"version":1,"partitions":[{"topic":t,
                                                     "partition":p}]}
    /admin/reassign_partitions                      {"version":1,"partitions":[{"topic":t,
                                                     "partition":p,"replicas":[ids]}]}
    /admin/controlled_shutdown/[broker_id]          (no value)

Anyone who may write to ZooKeeper may write anything there, so a decoder
reads as :mod:`hostbroker.cluster.zkread` does: the size and nesting of the
value are bounded before it is parsed (:class:`~hostbroker.cluster.zkread.Bounds`),
and then every field's type and range: broker ids 0 to 2**31-1, replica
lists of 1 to :data:`MAX_REPLICAS` distinct brokers, an ISR among them, a
leader in the ISR (or -1), epochs 0 to 2**31-1, partitions numbered 0 to
n-1 with n at most ``zookeeper.max.partitions.per.registration``, topic
names as ``zkread.name_ok`` allows. A decoder raises :class:`ValueError`
with one line that names the path; the reader reports it (``zkread.Reporter``)
and leaves the node out.

A topic node with no value (``b""``) is a 0.7-style topic, whose partitions
are the per-broker children: :func:`decode_assignment` returns None for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hostbroker.cluster.paths import BROKER_TOPICS, topic_path
from hostbroker.cluster.zkread import (
    DEFAULT,
    MAX_BROKER_ID,
    MAX_NAME_BYTES,
    Bounds,
    decimal,
    json_object,
    name_ok,
)
from hostbroker.protocol.replica_fields import MAX_REPLICAS

__all__ = [
    "ADMIN",
    "CONFIG_TOPICS",
    "CONTROLLED_SHUTDOWN",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "DELETE_TOPICS",
    "MAX_EPOCH",
    "MAX_TOPIC_CONFIGS",
    "NO_LEADER",
    "PREFERRED_REPLICA_ELECTION",
    "REASSIGN_PARTITIONS",
    "PartitionState",
    "assignment_path",
    "controlled_shutdown_path",
    "decode_assignment",
    "decode_broker_id_name",
    "decode_controller",
    "decode_controller_epoch",
    "decode_controller_info",
    "decode_preferred_election",
    "decode_reassignment",
    "decode_state",
    "decode_topic_config",
    "delete_topic_path",
    "encode_assignment",
    "encode_controller",
    "encode_controller_epoch",
    "encode_preferred_election",
    "encode_reassignment",
    "encode_state",
    "encode_topic_config",
    "partition_path",
    "partitions_path",
    "state_path",
    "topic_config_path",
]

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
CONFIG_TOPICS = "/config/topics"

NO_LEADER = -1
MAX_EPOCH = 2**31 - 1
MAX_TOPIC_CONFIGS = 256  # config overrides of one topic
MAX_CONFIG_VALUE_BYTES = 4096

_COMPACT = (",", ":")


def assignment_path(topic: str) -> str:
    """The topic's own node, which holds a replicated topic's assignment."""
    return topic_path(topic)


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def _encode(value: dict) -> bytes:
    return json.dumps(value, separators=_COMPACT, sort_keys=False).encode()


def _versioned(data: bytes, path: str, bounds: Bounds, what: str) -> dict:
    value = json_object(data, path, bounds, what)
    if value.get("version") != 1 or type(value.get("version")) is not int:
        raise ValueError(f"{path}: not version 1 ({what})")
    return value


def _int(value, path: str, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{path}: {name} {str(value)[:40]!r} is not an integer from {low} "
                         f"to {high}")
    return value


def _broker_list(value, path: str, name: str, min_len: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not min_len <= len(value) <= MAX_REPLICAS:
        raise ValueError(f"{path}: {name} is not a list of {min_len} to {MAX_REPLICAS} "
                         "broker ids")
    ids = tuple(_int(b, path, f"a broker id in {name}", 0, MAX_BROKER_ID) for b in value)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: {name} names a broker twice")
    return ids


def _topic(value, path: str) -> str:
    if not isinstance(value, str) or not name_ok(value):
        raise ValueError(f"{path}: {str(value)[:80]!r} is not a topic name")
    return value


def _partition_number(key, path: str, limit: int) -> int:
    if not isinstance(key, str) or not key.isascii() or not key.isdigit() or len(key) > 10 \
            or (len(key) > 1 and key[0] == "0"):
        raise ValueError(f"{path}: {str(key)[:40]!r} is not a partition number")
    number = int(key)
    if number >= limit:
        raise ValueError(f"{path}: partition {number} is over "
                         f"zookeeper.max.partitions.per.registration ({limit})")
    return number


# -- /brokers/topics/[topic] --------------------------------------------------

def encode_assignment(assignment: Mapping[int, Sequence[int]]) -> bytes:
    """The value of a replicated topic's node: ``{partition: replicas}``."""
    return _encode({"version": 1, "partitions": {
        str(p): [int(b) for b in assignment[p]] for p in sorted(assignment)}})


def decode_assignment(data: bytes, path: str,
                      bounds: Bounds = DEFAULT) -> dict[int, tuple[int, ...]] | None:
    """``{partition: replicas}`` of a replicated topic; None for a node with no
    value (a 0.7-style topic). Partitions are 0 to n-1 (at most
    ``zookeeper.max.partitions.per.registration``), each with 1 to MAX_REPLICAS
    distinct broker ids (not all of one length: a reassignment may change a
    partition's replication factor, as Kafka's does)."""
    if not data:
        return None
    value = _versioned(data, path, bounds, "a replica assignment")
    partitions = value.get("partitions")
    if not isinstance(partitions, dict) or not partitions:
        raise ValueError(f"{path}: partitions is not a non-empty object")
    limit = bounds.partitions_per_registration
    if len(partitions) > limit:
        raise ValueError(f"{path}: {len(partitions)} partitions are over "
                         f"zookeeper.max.partitions.per.registration ({limit})")
    out = {}
    for key, replicas in partitions.items():
        number = _partition_number(key, path, limit)
        out[number] = _broker_list(replicas, path, f"the replicas of partition {number}", 1)
    if set(out) != set(range(len(out))):
        raise ValueError(f"{path}: partitions are not numbered 0 to {len(out) - 1}")
    return dict(sorted(out.items()))


# -- /brokers/topics/[topic]/partitions/[p]/state ----------------------------

@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leadership as the controller wrote it; ``leader`` -1: offline."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


def encode_state(state: PartitionState) -> bytes:
    return _encode({"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                    "isr": list(state.isr), "controller_epoch": state.controller_epoch})


def decode_state(data: bytes, path: str, bounds: Bounds = DEFAULT) -> PartitionState:
    """The state node's value: a leader (-1 or a broker id in the ISR), epochs
    0 to 2**31-1, an ISR of at most MAX_REPLICAS distinct brokers (empty only
    with no leader)."""
    value = _versioned(data, path, bounds, "a partition state")
    leader = _int(value.get("leader"), path, "leader", NO_LEADER, MAX_BROKER_ID)
    leader_epoch = _int(value.get("leader_epoch"), path, "leader_epoch", 0, MAX_EPOCH)
    controller_epoch = _int(value.get("controller_epoch"), path, "controller_epoch", 0,
                            MAX_EPOCH)
    isr = _broker_list(value.get("isr"), path, "isr", 0)
    if leader != NO_LEADER and leader not in isr:
        raise ValueError(f"{path}: leader {leader} is not in the ISR")
    return PartitionState(leader, leader_epoch, isr, controller_epoch)


# -- /config/topics/[topic] ----------------------------------------------------

def encode_topic_config(config: Mapping[str, str]) -> bytes:
    return _encode({"version": 1, "config": {str(k): str(v) for k, v in sorted(config.items())}})


def decode_topic_config(data: bytes, path: str, bounds: Bounds = DEFAULT) -> dict[str, str]:
    """A topic's config overrides: at most MAX_TOPIC_CONFIGS string keys (up to
    255 bytes) with string values (up to 4096 bytes). Their meaning is checked
    by whoever applies them, as any topic config."""
    value = _versioned(data, path, bounds, "a topic config")
    config = value.get("config")
    if not isinstance(config, dict):
        raise ValueError(f"{path}: config is not an object")
    if len(config) > MAX_TOPIC_CONFIGS:
        raise ValueError(f"{path}: {len(config)} config keys are over {MAX_TOPIC_CONFIGS}")
    for key, setting in config.items():
        if not key or len(key.encode(errors="replace")) > MAX_NAME_BYTES \
                or not key.isprintable():
            raise ValueError(f"{path}: {key[:80]!r} is not a config key")
        if not isinstance(setting, str) or len(setting.encode(errors="replace")) \
                > MAX_CONFIG_VALUE_BYTES:
            raise ValueError(f"{path}: the value of {key[:80]} is not a string of at most "
                             f"{MAX_CONFIG_VALUE_BYTES} bytes")
    return dict(config)


# -- /controller, /controller_epoch -------------------------------------------

@dataclass(frozen=True, slots=True)
class ControllerInfo:
    broker_id: int
    timestamp_ms: int


def encode_controller(broker_id: int, timestamp_ms: int | None = None) -> bytes:
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    return _encode({"version": 1, "brokerid": int(broker_id), "timestamp": str(timestamp_ms)})


def decode_controller_info(data: bytes, path: str = CONTROLLER,
                           bounds: Bounds = DEFAULT) -> ControllerInfo:
    value = _versioned(data, path, bounds, "a controller registration")
    broker_id = _int(value.get("brokerid"), path, "brokerid", 0, MAX_BROKER_ID)
    stamp = value.get("timestamp")
    if not isinstance(stamp, str) or not stamp.isascii() or not stamp.isdigit() \
            or len(stamp) > 19:
        raise ValueError(f"{path}: timestamp {str(stamp)[:40]!r} is not decimal milliseconds")
    return ControllerInfo(broker_id, int(stamp))


def decode_controller(data: bytes, path: str = CONTROLLER, bounds: Bounds = DEFAULT) -> int:
    """The controller's broker id."""
    return decode_controller_info(data, path, bounds).broker_id


def encode_controller_epoch(epoch: int) -> bytes:
    return str(int(epoch)).encode()


def decode_controller_epoch(data: bytes, path: str = CONTROLLER_EPOCH,
                            bounds: Bounds = DEFAULT) -> int:
    """The controller epoch: a decimal number from 0 to 2**31-1."""
    return decimal(data, path, bounds, MAX_EPOCH, "the largest epoch")


# -- /admin ---------------------------------------------------------------------

def decode_broker_id_name(name: str, path: str) -> int:
    """The broker id a child name (``/admin/controlled_shutdown/[id]``) says."""
    if not name.isascii() or not name.isdigit() or len(name) > 10 or int(name) > MAX_BROKER_ID:
        raise ValueError(f"{path}: {name[:40]!r} is not a broker id")
    return int(name)


def _partition_list(data: bytes, path: str, bounds: Bounds, what: str) -> list[dict]:
    value = _versioned(data, path, bounds, what)
    entries = value.get("partitions")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: partitions is not a list ({what})")
    if len(entries) > bounds.partitions:
        raise ValueError(f"{path}: {len(entries)} partitions are over "
                         f"zookeeper.max.partitions ({bounds.partitions})")
    if any(not isinstance(entry, dict) for entry in entries):
        raise ValueError(f"{path}: a partition is not an object ({what})")
    return entries


def _topic_partition(entry: dict, path: str, bounds: Bounds, seen: set) -> tuple[str, int]:
    key = (_topic(entry.get("topic"), path),
           _int(entry.get("partition"), path, "partition", 0,
                bounds.partitions_per_registration - 1))
    if key in seen:
        raise ValueError(f"{path}: {key[0]} {key[1]} is named twice")
    seen.add(key)
    return key


def encode_preferred_election(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _encode({"version": 1, "partitions": [
        {"topic": topic, "partition": int(p)} for topic, p in partitions]})


def decode_preferred_election(data: bytes, path: str = PREFERRED_REPLICA_ELECTION,
                              bounds: Bounds = DEFAULT) -> list[tuple[str, int]]:
    """The partitions a preferred replica election asks for, in order, each once."""
    seen: set = set()
    return [_topic_partition(entry, path, bounds, seen)
            for entry in _partition_list(data, path, bounds, "a preferred replica election")]


def encode_reassignment(plan: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    return _encode({"version": 1, "partitions": [
        {"topic": topic, "partition": int(p), "replicas": [int(b) for b in plan[(topic, p)]]}
        for topic, p in sorted(plan)]})


def decode_reassignment(data: bytes, path: str = REASSIGN_PARTITIONS,
                        bounds: Bounds = DEFAULT) -> dict[tuple[str, int], tuple[int, ...]]:
    """``{(topic, partition): new replicas}`` of a reassignment, each partition
    once, each list 1 to MAX_REPLICAS distinct brokers."""
    seen: set = set()
    out = {}
    for entry in _partition_list(data, path, bounds, "a partition reassignment"):
        key = _topic_partition(entry, path, bounds, seen)
        out[key] = _broker_list(entry.get("replicas"), path,
                                f"the replicas of {key[0]} {key[1]}", 1)
    return out
