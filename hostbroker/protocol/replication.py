"""Codecs of replication (docs/spec/protocol.md, "Replication"): METADATA v1,
FETCH v1, LEADER_AND_ISR (14), STOP_REPLICA (15) and OFFSET_FOR_LEADER_EPOCH (16).

This module declares the bodies of the requests every broker and client
sends (METADATA v1, FETCH v1, OFFSET_FOR_LEADER_EPOCH) and is the codec of
all five: its tables and functions take the controller's requests too, whose
bodies are :mod:`hostbroker.protocol.controller_requests`; what the bodies
share (replica id lists, broker id and epoch constants, value checks) is
:mod:`hostbroker.protocol.replica_fields`. Both are named here as well, since
what :func:`decode_request` returns is theirs and most callers take the API
as one module.

Pure, like the rest of the package. The bodies are declared as the others
(:mod:`~hostbroker.protocol.bodies`) but live in their own tables keyed by
``(api_key, api_version)``, :data:`REPLICATION_REQUEST_TYPES` and
:data:`REPLICATION_RESPONSE_TYPES`, as :mod:`~hostbroker.protocol.groups`
does for the group APIs: version 0 of METADATA and FETCH stays exactly as it
was, and :func:`hostbroker.protocol.api.decode_request` still answers these
keys and versions UNSUPPORTED_VERSION.

- :func:`decode_request` decodes only the requests of this module;
  :func:`decode_any_request` decodes every request the broker knows (these,
  replicas across log dirs' (:mod:`~hostbroker.protocol.logdirs`: METADATA
  v2, CREATE_TOPIC v1, ALTER_REPLICA_DIRS, LOG_DIR_ADMIN), those of
  changing topics (:mod:`~hostbroker.protocol.topics_admin`: ALTER_TOPIC,
  LIST_OFFSET_GROUPS), the throttled versions (:mod:`~hostbroker.protocol.throttled`:
  PRODUCE v1, FETCH v2), the group APIs, version 0).
- :func:`request_version` reads ``(api_key, api_version)`` off a frame
  without decoding it, for the network code's routing.
- :func:`encode_fetch_v1_response_parts` is the sendfile form of a FETCH v1
  answer, as :func:`~hostbroker.protocol.api.encode_fetch_response_parts` is
  of version 0.

Every request and response is checked as it is decoded: a list of replica
ids (``replicas``, ``isr``) longer than :data:`MAX_REPLICAS` is refused at its
count (:mod:`~hostbroker.protocol.replica_fields`); broker ids, epochs and flags out of their range, a partition named
twice, an ISR member or leader outside the replicas are INVALID_REQUEST (a
:class:`ProtocolError`, as for any undecodable frame). Limits set by the
broker (which partitions it has, whether it leads them) are not the codec's:
the handler answers them per partition.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import acls, api, groups, logdirs, throttled, topics_admin
from hostbroker.protocol.bodies import ApiKey, MetadataBroker, TopicConfigEntry
from hostbroker.protocol.controller_requests import (
    BrokerEndpoint,
    BrokerEndpoints,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    LeaderAndIsrRequestV1,
    LeaderAndIsrResponse,
    PartitionError,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    TopicConfigs,
)
from hostbroker.protocol.primitives import Buffer
from hostbroker.protocol.replica_fields import (
    CONSUMER_REPLICA_ID,
    DEBUG_REPLICA_ID,
    MAX_REPLICAS,
    NO_EPOCH,
    NO_LEADER,
    ReplicaIds,
    check_epoch,
    check_partition,
    check_replica_id,
    refuse,
)
from hostbroker.protocol.schema import (
    Array,
    ErrorCodeField,
    Int32,
    Int64,
    MessageSet,
    NullableString,
    String,
    wire_record,
)

__all__ = [
    "BrokerEndpoint",
    "BrokerEndpoints",
    "FETCH_V1",
    "MAX_REPLICAS",
    "METADATA_V1",
    "NO_EPOCH",
    "NO_LEADER",
    "CONSUMER_REPLICA_ID",
    "DEBUG_REPLICA_ID",
    "REPLICATION_REQUEST_TYPES",
    "REPLICATION_RESPONSE_TYPES",
    "FetchPartitionV1",
    "FetchPartitionResultV1",
    "FetchRequestV1",
    "FetchResponseV1",
    "FetchV1PartitionHeader",
    "LeaderAndIsrPartition",
    "MetadataBroker",
    "LeaderAndIsrRequest",
    "LeaderAndIsrRequestV1",
    "LeaderAndIsrResponse",
    "MetadataPartitionV1",
    "MetadataRequestV1",
    "MetadataResponseV1",
    "MetadataTopicV1",
    "OffsetForLeaderEpochPartition",
    "OffsetForLeaderEpochRequest",
    "OffsetForLeaderEpochResponse",
    "OffsetForLeaderEpochResult",
    "PartitionError",
    "StopReplicaPartition",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "TopicConfigEntry",
    "TopicConfigs",
    "decode_any_request",
    "decode_request",
    "decode_response",
    "encode_fetch_v1_response_parts",
    "encode_request",
    "encode_response",
    "fetch_v1_part_emptied",
    "request_version",
]

METADATA_V1 = 1
FETCH_V1 = 1


# METADATA (3) version 1


@wire_record
class MetadataRequestV1:
    """An empty ``topics`` asks for every topic (the body of version 0)."""

    API_KEY: ClassVar[int] = ApiKey.METADATA
    API_VERSION: ClassVar[int] = METADATA_V1
    topics: Array[String] = ()

    def check(self) -> None:
        return None


@wire_record
class MetadataPartitionV1:
    """``leader`` is -1 when the partition has none; offsets are -1 when the
    answering broker has no replica of the partition; ``high_watermark`` equals
    ``log_end_offset`` for a partition that is not replicated."""

    partition: Int32
    error_code: ErrorCodeField
    leader: Int32
    leader_epoch: Int32
    replicas: ReplicaIds
    isr: ReplicaIds
    log_start_offset: Int64
    high_watermark: Int64
    log_dir: NullableString


@wire_record
class MetadataTopicV1:
    topic: String
    error_code: ErrorCodeField
    partitions: Array[MetadataPartitionV1]


@wire_record
class MetadataResponseV1:
    """``controller_id`` is -1 when the broker knows of no controller."""

    broker_id: Int32
    controller_id: Int32
    brokers: Array[MetadataBroker]
    topics: Array[MetadataTopicV1]

    def check(self) -> None:
        for topic in self.topics:
            for p in topic.partitions:
                if len(set(p.replicas)) != len(p.replicas) or not set(p.isr) <= set(p.replicas):
                    refuse(f"replicas and ISR of {topic.topic[:80]!r} {p.partition} do not agree")


# FETCH (1) version 1


@wire_record
class FetchPartitionV1:
    """``leader_epoch`` -1: not checked; else the epoch the fetcher believes current."""

    topic: String
    partition: Int32
    leader_epoch: Int32
    offset: Int64
    max_bytes: Int32


@wire_record
class FetchRequestV1:
    """``replica_id`` -1: a consumer (reads below the high watermark); -2: a
    debugging consumer (any replica, below its own high watermark); a broker
    id: a follower (reads below the log end, within one leader epoch)."""

    API_KEY: ClassVar[int] = ApiKey.FETCH
    API_VERSION: ClassVar[int] = FETCH_V1
    replica_id: Int32
    max_wait_ms: Int32
    min_bytes: Int32
    partitions: Array[FetchPartitionV1]

    def check(self) -> None:
        check_replica_id(self.replica_id, debug=True)
        seen: set = set()
        for p in self.partitions:
            check_partition(p.topic, p.partition, seen, "a fetch")
            check_epoch(p.leader_epoch, f"leader epoch of {p.topic[:80]!r} {p.partition}",
                         allow_none=True)

    @property
    def from_follower(self) -> bool:
        return self.replica_id >= 0


@wire_record
class FetchPartitionResultV1:
    """``data_epoch``: the leader epoch that wrote every entry of ``message_set``
    (-1 when it is empty or the fetch came from a consumer)."""

    topic: String
    partition: Int32
    error_code: ErrorCodeField
    high_watermark: Int64
    log_end_offset: Int64
    data_epoch: Int32
    message_set: MessageSet


@wire_record
class FetchResponseV1:
    partitions: Array[FetchPartitionResultV1]

    def check(self) -> None:
        return None


class FetchV1PartitionHeader(NamedTuple):
    """One partition of a FETCH v1 answer whose ``data_length`` bytes are sent apart."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_end_offset: int
    data_epoch: int
    data_length: int


# OFFSET_FOR_LEADER_EPOCH (16)


@wire_record
class OffsetForLeaderEpochPartition:
    topic: String
    partition: Int32
    leader_epoch: Int32


@wire_record
class OffsetForLeaderEpochRequest:
    API_KEY: ClassVar[int] = ApiKey.OFFSET_FOR_LEADER_EPOCH
    API_VERSION: ClassVar[int] = 0
    replica_id: Int32
    partitions: Array[OffsetForLeaderEpochPartition]

    def check(self) -> None:
        check_replica_id(self.replica_id)
        seen: set = set()
        for p in self.partitions:
            check_partition(p.topic, p.partition, seen, "an OFFSET_FOR_LEADER_EPOCH")
            check_epoch(p.leader_epoch, f"leader epoch of {p.topic[:80]!r} {p.partition}",
                         allow_none=True)


@wire_record
class OffsetForLeaderEpochResult:
    """``leader_epoch``: the largest epoch <= the one asked; ``end_offset``: the
    start of the next epoch after it, or the log end (both -1 when none)."""

    topic: String
    partition: Int32
    error_code: ErrorCodeField
    leader_epoch: Int32
    end_offset: Int64


@wire_record
class OffsetForLeaderEpochResponse:
    partitions: Array[OffsetForLeaderEpochResult]

    def check(self) -> None:
        return None


ReplicationRequest = (
    MetadataRequestV1
    | FetchRequestV1
    | LeaderAndIsrRequest
    | LeaderAndIsrRequestV1
    | StopReplicaRequest
    | OffsetForLeaderEpochRequest
)

ReplicationResponse = (
    MetadataResponseV1
    | FetchResponseV1
    | LeaderAndIsrResponse
    | StopReplicaResponse
    | OffsetForLeaderEpochResponse
)

REPLICATION_REQUEST_TYPES: dict[tuple[int, int], type] = {
    (cls.API_KEY, cls.API_VERSION): cls
    for cls in (
        MetadataRequestV1,
        FetchRequestV1,
        LeaderAndIsrRequest,
        LeaderAndIsrRequestV1,
        StopReplicaRequest,
        OffsetForLeaderEpochRequest,
    )
}

REPLICATION_RESPONSE_TYPES: dict[tuple[int, int], type] = {
    (ApiKey.METADATA, METADATA_V1): MetadataResponseV1,
    (ApiKey.FETCH, FETCH_V1): FetchResponseV1,
    (ApiKey.LEADER_AND_ISR, 0): LeaderAndIsrResponse,
    (ApiKey.LEADER_AND_ISR, 1): LeaderAndIsrResponse,
    (ApiKey.STOP_REPLICA, 0): StopReplicaResponse,
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0): OffsetForLeaderEpochResponse,
}

_HEAD = struct.Struct(">hh")  # api_key, api_version


def request_version(frame: Buffer) -> tuple[int, int] | None:
    """``(api_key, api_version)`` of a request frame (without size prefix), or
    None when it is too short to say; nothing else is decoded."""
    if len(frame) < _HEAD.size:
        return None
    return _HEAD.unpack_from(frame)


def decode_request(frame: Buffer, max_entries: int | None = None
                   ) -> tuple[api.RequestHeader, ReplicationRequest]:
    """Header and body of a request of this module (frame without size prefix);
    any other api key or version is UNSUPPORTED_VERSION, any bad value
    INVALID_REQUEST, both as :class:`ProtocolError`."""
    header = api.decode_request_header(frame)
    request_type = REPLICATION_REQUEST_TYPES.get((header.api_key, header.api_version))
    if request_type is None:
        raise ProtocolError(
            f"no replication request has api_key {header.api_key} version {header.api_version}",
            code=ErrorCode.UNSUPPORTED_VERSION,
        )
    request = api.decode_body(request_type, frame, header.body_offset, max_entries)
    request.check()
    return header, request


def decode_any_request(frame: Buffer, max_entries: int | None = None):
    """Header and body of any request the broker knows: this module's, those
    of :mod:`~hostbroker.protocol.logdirs`,
    :mod:`~hostbroker.protocol.topics_admin` and :mod:`~hostbroker.protocol.acls`
    (keys 22-27), the group APIs, and version 0
    (as :func:`hostbroker.protocol.groups.decode_any_request`)."""
    header = api.decode_request_header(frame)
    version = (header.api_key, header.api_version)
    request_type = (REPLICATION_REQUEST_TYPES.get(version)
                    or logdirs.LOGDIRS_REQUEST_TYPES.get(version)
                    or topics_admin.TOPICS_ADMIN_REQUEST_TYPES.get(version)
                    or acls.ACLS_REQUEST_TYPES.get(version)
                    or throttled.THROTTLED_REQUEST_TYPES.get(version))
    if request_type is None:
        return groups.decode_any_request(frame, max_entries)
    request = api.decode_body(request_type, frame, header.body_offset, max_entries)
    request.check()
    return header, request


def _layout(cls: type) -> tuple:
    return tuple((f.name, f.type) for f in dataclasses.fields(cls))


def encode_request(body, correlation_id: int, client_id: str | None = "",
                   version: int | None = None) -> bytes:
    """The frame of ``body`` (size prefix included) as ``version`` (default:
    the body's own). A body may go out as another version only when that
    version's body has the same layout (METADATA v0, v1 and v2); else ValueError."""
    own = getattr(body, "API_VERSION", api.API_VERSION)
    if version is None or version == own:
        return api.encode_request(body, correlation_id, client_id)
    target = (REPLICATION_REQUEST_TYPES.get((body.API_KEY, version))
              or logdirs.LOGDIRS_REQUEST_TYPES.get((body.API_KEY, version))
              or groups.GROUP_REQUEST_TYPES.get((body.API_KEY, version))
              or (api.REQUEST_TYPES.get(body.API_KEY) if version == api.API_VERSION else None))
    if target is None or _layout(target) != _layout(type(body)):
        raise ValueError(f"a {type(body).__name__} cannot be sent as version {version}")
    return api.encode_request(target(*(getattr(body, f.name)
                                       for f in dataclasses.fields(body))),
                              correlation_id, client_id)


def encode_response(correlation_id: int, response) -> bytes:
    """The frame of ``response``, size prefix included."""
    return api.encode_response(correlation_id, response)


def decode_response(frame: Buffer, cls: type) -> tuple[int, ReplicationResponse]:
    """``(correlation_id, body)`` of a response frame (without size prefix)
    decoded as ``cls`` (one of :data:`REPLICATION_RESPONSE_TYPES`, or of
    :data:`~hostbroker.protocol.logdirs.LOGDIRS_RESPONSE_TYPES` or
    :data:`~hostbroker.protocol.topics_admin.TOPICS_ADMIN_RESPONSE_TYPES`), checked.
    Check :func:`~hostbroker.protocol.api.is_error_frame` first."""
    if cls in topics_admin.TOPICS_ADMIN_RESPONSE_TYPES.values() \
            and cls not in logdirs.LOGDIRS_RESPONSE_TYPES.values():
        return topics_admin.decode_response(frame, cls)
    if cls in logdirs.LOGDIRS_RESPONSE_TYPES.values():
        return logdirs.decode_response(frame, cls)
    if cls in acls.ACLS_RESPONSE_TYPES.values():
        return acls.decode_response(frame, cls)
    if cls in throttled.THROTTLED_RESPONSE_TYPES.values():
        return throttled.decode_response(frame, cls)
    if cls not in REPLICATION_RESPONSE_TYPES.values():
        raise ValueError(f"{cls!r} is not a replication response")
    correlation_id, response = api.decode_response_as(cls, frame)
    response.check()
    return correlation_id, response


# partition, error_code, high_watermark, log_end_offset, data_epoch, the set's length
_FETCH_ONE_TAIL = struct.Struct(">ihqqii")
_FETCH_PART_TAIL = struct.Struct(">hqqii")  # from error_code to the set's length: ends a chunk


def encode_fetch_v1_response_parts(
    correlation_id: int,
    partitions: Sequence[FetchV1PartitionHeader | tuple[str, int, int, int, int, int, int]],
) -> list[bytes]:
    """Header chunks ``h0 .. hk`` of a FETCH v1 answer whose message sets are sent
    apart, exactly as :func:`~hostbroker.protocol.api.encode_fetch_response_parts`
    for version 0: the frame is ``h0 + data0 + h1 + ... + data(k-1) + hk``,
    ``h0`` starts with the size prefix (which counts the data), ``hk`` may be
    ``b""``. ValueError for a value that does not fit its wire type."""
    return api.fetch_header_parts(correlation_id, partitions, _FETCH_ONE_TAIL)


def fetch_v1_part_emptied(head: Buffer, data_length: int, code: ErrorCode | int) -> bytes:
    """``head`` (a chunk of :func:`encode_fetch_v1_response_parts` that a message
    set of ``data_length`` bytes follows) with that partition's error code set to
    ``code``, its data epoch to -1 and its set empty; shrink the frame by
    ``data_length`` with :func:`~hostbroker.protocol.api.frame_shrunk`."""
    return api.emptied_part(head, data_length, _FETCH_PART_TAIL, "FETCH v1",
                            lambda fields: (code, fields[1], fields[2], NO_EPOCH, 0))
