"""Codecs of the controller's requests (docs/spec/protocol.md, "Replication"):
LEADER_AND_ISR (14) and STOP_REPLICA (15), and their answers.

Pure. Only a controller sends these; a broker's handler answers them
(``workers/handler_replication.py``). They are decoded and encoded through
:mod:`hostbroker.protocol.replication`, whose tables hold them with the other
replication APIs. Every request is checked as it is decoded: a controller id
or epoch out of range, a partition named twice, replicas that name a broker
twice, an ISR member or leader outside the replicas, a config key or broker
given twice are INVALID_REQUEST (:mod:`hostbroker.protocol.replica_fields`).
"""

from __future__ import annotations

from typing import ClassVar

from hostbroker.protocol.bodies import ApiKey, MetadataBroker, TopicConfigEntry
from hostbroker.protocol.replica_fields import (
    ReplicaIds,
    check_broker_id,
    check_epoch,
    check_partition,
    check_replica_set,
    refuse,
)
from hostbroker.protocol.schema import (
    Array,
    ErrorCodeField,
    Int8,
    Int32,
    NullableString,
    String,
    wire_record,
)

__all__ = [
    "BrokerEndpoint",
    "BrokerEndpoints",
    "LeaderAndIsrPartition",
    "LeaderAndIsrRequest",
    "LeaderAndIsrRequestV1",
    "LeaderAndIsrResponse",
    "PartitionError",
    "StopReplicaPartition",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "TopicConfigs",
]

# LEADER_AND_ISR (14)

# A broker's listeners in LEADER_AND_ISR version 0: the layout of METADATA's live brokers.
BrokerEndpoint = MetadataBroker


@wire_record
class BrokerEndpoints:
    """A broker's listeners in LEADER_AND_ISR version 1: every kind it
    registered, its ``ssl://`` one too (``ssl_host`` None, ``ssl_port`` -1
    where it has none)."""

    broker_id: Int32
    host: NullableString
    port: Int32
    unix_path: NullableString
    ssl_host: NullableString = None
    ssl_port: Int32 = -1


@wire_record
class LeaderAndIsrPartition:
    """What the controller decided for one partition; ``zk_version`` is the
    version of its state node that holds this ISR."""

    topic: String
    partition: Int32
    leader: Int32
    leader_epoch: Int32
    isr: ReplicaIds
    zk_version: Int32
    replicas: ReplicaIds


@wire_record
class TopicConfigs:
    """A topic's config overrides (``/config/topics/[topic]``), e.g. min.insync.replicas."""

    topic: String
    configs: Array[TopicConfigEntry] = ()


@wire_record
class LeaderAndIsrRequest:
    """``brokers``: the listeners of the leaders named (a follower connects to them)."""

    API_KEY: ClassVar[int] = ApiKey.LEADER_AND_ISR
    API_VERSION: ClassVar[int] = 0
    controller_id: Int32
    controller_epoch: Int32
    partitions: Array[LeaderAndIsrPartition]
    topic_configs: Array[TopicConfigs] = ()
    brokers: Array[BrokerEndpoint] = ()

    def check(self) -> None:
        check_broker_id(self.controller_id, "controller id")
        check_epoch(self.controller_epoch, "controller epoch")
        seen: set = set()
        for p in self.partitions:
            check_partition(p.topic, p.partition, seen, "a LEADER_AND_ISR")
            check_epoch(p.leader_epoch, f"leader epoch of {p.topic[:80]!r} {p.partition}")
            if not p.replicas:
                refuse(f"{p.topic[:80]!r} {p.partition} has no replicas")
            check_replica_set(p.topic, p.partition, p.replicas, p.isr, p.leader)
        topics: set = set()
        for entry in self.topic_configs:
            if entry.topic in topics:
                refuse(f"configs of topic {entry.topic[:80]!r} given twice")
            topics.add(entry.topic)
            keys = [config.key for config in entry.configs]
            if len(set(keys)) != len(keys):
                refuse(f"a config key of topic {entry.topic[:80]!r} given twice")
        _check_brokers(self.brokers)


def _check_brokers(brokers) -> None:
    ids: set = set()
    for broker in brokers:
        check_broker_id(broker.broker_id, "broker id")
        if broker.broker_id in ids:
            refuse(f"broker {broker.broker_id} listed twice")
        ids.add(broker.broker_id)
        if not 0 <= broker.port <= 65535:
            refuse(f"port {broker.port} of broker {broker.broker_id} is out of range")
        ssl_port = getattr(broker, "ssl_port", -1)
        if not -1 <= ssl_port <= 65535:
            refuse(f"ssl port {ssl_port} of broker {broker.broker_id} is out of range")


@wire_record
class LeaderAndIsrRequestV1:
    """Version 1: as version 0, each broker named with every kind of listener
    it registered (:class:`BrokerEndpoints`), whatever protocol the brokers
    speak to one another."""

    API_KEY: ClassVar[int] = ApiKey.LEADER_AND_ISR
    API_VERSION: ClassVar[int] = 1
    controller_id: Int32
    controller_epoch: Int32
    partitions: Array[LeaderAndIsrPartition]
    topic_configs: Array[TopicConfigs] = ()
    brokers: Array[BrokerEndpoints] = ()

    def check(self) -> None:
        LeaderAndIsrRequest.check(self)


@wire_record
class PartitionError:
    topic: String
    partition: Int32
    error_code: ErrorCodeField


@wire_record
class LeaderAndIsrResponse:
    """``error_code`` is the request's (STALE_CONTROLLER_EPOCH); ``partitions``
    each partition's own."""

    error_code: ErrorCodeField
    partitions: Array[PartitionError] = ()

    def check(self) -> None:
        return None


# STOP_REPLICA (15)


@wire_record
class StopReplicaPartition:
    topic: String
    partition: Int32


@wire_record
class StopReplicaRequest:
    """``delete_partitions`` 1: remove the replicas' logs too (topic deletion,
    a replica moved away by a reassignment); 0: stop being leader or follower."""

    API_KEY: ClassVar[int] = ApiKey.STOP_REPLICA
    API_VERSION: ClassVar[int] = 0
    controller_id: Int32
    controller_epoch: Int32
    delete_partitions: Int8
    partitions: Array[StopReplicaPartition]

    def check(self) -> None:
        check_broker_id(self.controller_id, "controller id")
        check_epoch(self.controller_epoch, "controller epoch")
        if self.delete_partitions not in (0, 1):
            refuse(f"delete_partitions {self.delete_partitions} is neither 0 nor 1")
        seen: set = set()
        for p in self.partitions:
            check_partition(p.topic, p.partition, seen, "a STOP_REPLICA")


@wire_record
class StopReplicaResponse:
    error_code: ErrorCodeField
    partitions: Array[PartitionError] = ()

    def check(self) -> None:
        return None
