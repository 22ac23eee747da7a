"""What every replication request shares (docs/spec/protocol.md,
"Replication"): the broker id and epoch constants, the bounded list of
replica ids (:data:`ReplicaIds`, refused at its count over
:data:`MAX_REPLICAS`), and the value checks the requests' ``check`` methods
run, each refusing with INVALID_REQUEST (a :class:`ProtocolError`).

Pure. The bodies are :mod:`hostbroker.protocol.replication` (METADATA v1,
FETCH v1, OFFSET_FOR_LEADER_EPOCH, and the codec of all five APIs) and
:mod:`hostbroker.protocol.controller_requests` (LEADER_AND_ISR, STOP_REPLICA).
"""

from __future__ import annotations

import struct
from typing import Annotated

from hostbroker.errors import ProtocolError
from hostbroker.protocol.primitives import Reader, Writer
from hostbroker.protocol.schema import INT32, WireType

__all__ = [
    "CONSUMER_REPLICA_ID",
    "DEBUG_REPLICA_ID",
    "MAX_BROKER_ID",
    "MAX_REPLICAS",
    "NO_EPOCH",
    "NO_LEADER",
    "REPLICA_IDS",
    "ReplicaIds",
    "check_broker_id",
    "check_epoch",
    "check_partition",
    "check_replica_id",
    "check_replica_set",
    "refuse",
]

# Most replicas of one partition (the replication factor's bound, refused in
# one line by whoever assigns; the shared partition table has room for this many).
MAX_REPLICAS = 8
# replica_id of a FETCH v1 or OFFSET_FOR_LEADER_EPOCH from a consumer, not a broker.
CONSUMER_REPLICA_ID = -1
# replica_id of a FETCH v1 from a debugging consumer: any replica of a partition serves
# it from its own log, below its own view of the high watermark (replicas verify).
DEBUG_REPLICA_ID = -2
# A leader of -1: the partition has none (offline). An epoch of -1: not known / not checked.
NO_LEADER = -1
NO_EPOCH = -1
MAX_BROKER_ID = 2**31 - 1


_REPLICA_IDS = [struct.Struct(f">{count}i") for count in range(MAX_REPLICAS + 1)]


def _read_replica_ids(reader: Reader) -> tuple[int, ...]:
    """An array of int32 broker ids, refused at its count when over MAX_REPLICAS."""
    count = reader.int32()
    if not 0 <= count <= MAX_REPLICAS:
        raise ProtocolError(f"a list of {count} replicas is not 0 to {MAX_REPLICAS} long")
    return reader.fixed(_REPLICA_IDS[count], "replica ids")


def _write_replica_ids(writer: Writer, values) -> None:
    values = tuple(values)
    if len(values) > MAX_REPLICAS:
        raise ValueError(f"{len(values)} replicas are over the limit of {MAX_REPLICAS}")
    writer.array(values, Writer.int32)


REPLICA_IDS = WireType(f"[{INT32.name}] of at most {MAX_REPLICAS}", _read_replica_ids,
                       _write_replica_ids, 4)
ReplicaIds = Annotated[tuple[int, ...], REPLICA_IDS]


def refuse(message: str) -> None:
    """Refuse a request: INVALID_REQUEST, with ``message``."""
    raise ProtocolError(message)


def check_broker_id(value: int, what: str, allow_none: bool = False) -> None:
    low = -1 if allow_none else 0
    if not low <= value <= MAX_BROKER_ID:
        refuse(f"{what} {value} is not a broker id")


def check_epoch(value: int, what: str, allow_none: bool = False) -> None:
    if value < (NO_EPOCH if allow_none else 0):
        refuse(f"{what} {value} is negative")


def check_partition(topic: str, partition: int, seen: set, what: str) -> None:
    if not topic:
        refuse(f"an empty topic name in {what}")
    if partition < 0:
        refuse(f"partition {partition} of {topic[:80]!r} is negative")
    if (topic, partition) in seen:
        refuse(f"partition {topic[:80]!r} {partition} named twice in {what}")
    seen.add((topic, partition))


def check_replica_set(topic: str, partition: int, replicas: tuple[int, ...],
                       isr: tuple[int, ...], leader: int) -> None:
    """The shape every replica assignment keeps: distinct broker ids, ISR and leader among them."""
    where = f"{topic[:80]!r} {partition}"
    for replica in replicas:
        check_broker_id(replica, f"replica of {where}")
    if len(set(replicas)) != len(replicas):
        refuse(f"replicas of {where} name a broker twice")
    if len(set(isr)) != len(isr):
        refuse(f"the ISR of {where} names a broker twice")
    if not set(isr) <= set(replicas):
        refuse(f"the ISR of {where} is not among its replicas")
    check_broker_id(leader, f"leader of {where}", allow_none=True)
    if leader != NO_LEADER and leader not in replicas:
        refuse(f"leader {leader} of {where} is not among its replicas")


def check_replica_id(value: int, debug: bool = False) -> None:
    """A broker id or -1 (a consumer); with ``debug``, also -2 (a debugging consumer)."""
    if debug and value == DEBUG_REPLICA_ID:
        return
    if not CONSUMER_REPLICA_ID <= value <= MAX_BROKER_ID:
        refuse(f"replica id {value} is neither a broker id nor -1 (a consumer)"
               + (" nor -2 (a debugging consumer)" if debug else ""))
