"""The request and response bodies of every API in docs/spec/protocol.md ("APIs").

Each body is a frozen dataclass whose fields are in wire order and annotated
with their wire type (see :mod:`hostbroker.protocol.schema`). Requests carry
their ``API_KEY``; :data:`REQUEST_TYPES` and :data:`RESPONSE_TYPES` are the
dispatch tables :mod:`hostbroker.protocol.api` decodes through. Repeated parts are tuples.

Message sets are opaque bytes here (``bytes`` when built by a caller,
zero-copy ``memoryview`` slices of the frame when decoded).
"""

from __future__ import annotations

import enum
from typing import ClassVar

from hostbroker.protocol.schema import (
    Array,
    ErrorCodeField,
    Int16,
    Int32,
    Int64,
    MessageSet,
    NullableString,
    String,
    wire_record,
)


__all__ = [
    "API_VERSION",
    "EARLIEST_TIME",
    "LATEST_TIME",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "AdminResponse",
    "ApiKey",
    "CreateTopicRequest",
    "DeleteTopicRequest",
    "FetchPartition",
    "FetchPartitionResult",
    "FetchRequest",
    "FetchResponse",
    "MetadataBroker",
    "MetadataPartition",
    "MetadataRequest",
    "MetadataResponse",
    "MetadataTopic",
    "OffsetCommitPartition",
    "OffsetCommitPartitionResult",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchPartition",
    "OffsetFetchPartitionResult",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetsRequest",
    "OffsetsResponse",
    "ProducePartition",
    "ProducePartitionResult",
    "ProduceRequest",
    "ProduceResponse",
    "Request",
    "Response",
    "TopicConfigEntry",
]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    OFFSETS = 2
    METADATA = 3
    CREATE_TOPIC = 4
    DELETE_TOPIC = 5
    OFFSET_COMMIT = 6
    OFFSET_FETCH = 7
    # 8-11 (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP) and OFFSET_COMMIT
    # version 1 are in hostbroker.protocol.groups (docs/spec/groups.md), outside
    # these tables: api.decode_request answers them UNSUPPORTED_VERSION.
    # Replication (docs/spec/protocol.md, "Replication"): these keys, METADATA
    # v1 and FETCH v1 are in hostbroker.protocol.replication, outside these
    # tables too.
    LEADER_AND_ISR = 14
    STOP_REPLICA = 15
    OFFSET_FOR_LEADER_EPOCH = 16
    # Replicas across log dirs (docs/spec/protocol.md, "Replicas across log dirs"):
    # these keys, METADATA v2 and CREATE_TOPIC v1 are in hostbroker.protocol.logdirs.
    ALTER_REPLICA_DIRS = 17
    LOG_DIR_ADMIN = 18
    # Changing a topic and listing the groups with stored offsets (docs/spec/
    # protocol.md): these keys are in hostbroker.protocol.topics_admin.
    ALTER_TOPIC = 19
    LIST_OFFSET_GROUPS = 20
    DESCRIBE_TOPIC_CONFIGS = 21
    # Access control (docs/spec/protocol.md, "Access control"): these keys are in
    # hostbroker.protocol.acls.
    CREATE_ACLS = 22
    DELETE_ACLS = 23
    DESCRIBE_ACLS = 24
    ALTER_QUOTAS = 25
    DESCRIBE_QUOTAS = 26
    WHOAMI = 27


API_VERSION = 0

# The OFFSETS ``time`` values with a special meaning.
LATEST_TIME = -1
EARLIEST_TIME = -2


# PRODUCE (0)


@wire_record
class ProducePartition:
    topic: String
    partition: Int32
    message_set: MessageSet


@wire_record
class ProduceRequest:
    API_KEY: ClassVar[ApiKey] = ApiKey.PRODUCE
    acks: Int16
    timeout_ms: Int32
    partitions: Array[ProducePartition]


@wire_record
class ProducePartitionResult:
    """``base_offset`` and ``log_end_offset`` are -1 when ``error_code`` is set."""

    topic: String
    partition: Int32
    error_code: ErrorCodeField
    base_offset: Int64
    log_end_offset: Int64


@wire_record
class ProduceResponse:
    partitions: Array[ProducePartitionResult]


# FETCH (1)


@wire_record
class FetchPartition:
    topic: String
    partition: Int32
    offset: Int64
    max_bytes: Int32


@wire_record
class FetchRequest:
    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH
    max_wait_ms: Int32
    min_bytes: Int32
    partitions: Array[FetchPartition]


@wire_record
class FetchPartitionResult:
    """``message_set`` may end with a partial entry (the fetch is cut at max_bytes)."""

    topic: String
    partition: Int32
    error_code: ErrorCodeField
    log_end_offset: Int64
    message_set: MessageSet


@wire_record
class FetchResponse:
    partitions: Array[FetchPartitionResult]


# OFFSETS (2)


@wire_record
class OffsetsRequest:
    """``time`` is ms since the epoch, or LATEST_TIME / EARLIEST_TIME."""

    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSETS
    topic: String
    partition: Int32
    time: Int64
    max_offsets: Int32


@wire_record
class OffsetsResponse:
    error_code: ErrorCodeField
    offsets: Array[Int64]


# METADATA (3)


@wire_record
class MetadataRequest:
    """An empty ``topics`` asks for every topic."""

    API_KEY: ClassVar[ApiKey] = ApiKey.METADATA
    topics: Array[String] = ()


@wire_record
class MetadataBroker:
    """A live broker; ``host`` or ``unix_path`` is None when it has no such listener."""

    broker_id: Int32
    host: NullableString
    port: Int32
    unix_path: NullableString


@wire_record
class MetadataPartition:
    partition: Int32
    error_code: ErrorCodeField
    broker_id: Int32
    log_start_offset: Int64
    log_end_offset: Int64
    log_dir: NullableString


@wire_record
class MetadataTopic:
    topic: String
    error_code: ErrorCodeField
    partitions: Array[MetadataPartition]


@wire_record
class MetadataResponse:
    broker_id: Int32
    brokers: Array[MetadataBroker]
    topics: Array[MetadataTopic]


# CREATE_TOPIC (4) / DELETE_TOPIC (5)


@wire_record
class TopicConfigEntry:
    key: String
    value: String


@wire_record
class CreateTopicRequest:
    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_TOPIC
    topic: String
    partitions: Int32
    configs: Array[TopicConfigEntry] = ()


@wire_record
class DeleteTopicRequest:
    API_KEY: ClassVar[ApiKey] = ApiKey.DELETE_TOPIC
    topic: String


@wire_record
class AdminResponse:
    """The answer to CREATE_TOPIC and DELETE_TOPIC."""

    error_code: ErrorCodeField
    error_message: NullableString = None


# OFFSET_COMMIT (6)


@wire_record
class OffsetCommitPartition:
    topic: String
    partition: Int32
    offset: Int64
    metadata: NullableString = None


@wire_record
class OffsetCommitRequest:
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_COMMIT
    group: String
    partitions: Array[OffsetCommitPartition]


@wire_record
class OffsetCommitPartitionResult:
    topic: String
    partition: Int32
    error_code: ErrorCodeField


@wire_record
class OffsetCommitResponse:
    partitions: Array[OffsetCommitPartitionResult]


# OFFSET_FETCH (7)


@wire_record
class OffsetFetchPartition:
    topic: String
    partition: Int32


@wire_record
class OffsetFetchRequest:
    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH
    group: String
    partitions: Array[OffsetFetchPartition]


@wire_record
class OffsetFetchPartitionResult:
    """``offset`` is -1 for a partition the group never committed."""

    topic: String
    partition: Int32
    offset: Int64
    metadata: NullableString
    error_code: ErrorCodeField


@wire_record
class OffsetFetchResponse:
    partitions: Array[OffsetFetchPartitionResult]


Request = (
    ProduceRequest
    | FetchRequest
    | OffsetsRequest
    | MetadataRequest
    | CreateTopicRequest
    | DeleteTopicRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
)

Response = (
    ProduceResponse
    | FetchResponse
    | OffsetsResponse
    | MetadataResponse
    | AdminResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
)

REQUEST_TYPES: dict[int, type] = {
    cls.API_KEY: cls
    for cls in (
        ProduceRequest,
        FetchRequest,
        OffsetsRequest,
        MetadataRequest,
        CreateTopicRequest,
        DeleteTopicRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
    )
}

RESPONSE_TYPES: dict[int, type] = {
    ApiKey.PRODUCE: ProduceResponse,
    ApiKey.FETCH: FetchResponse,
    ApiKey.OFFSETS: OffsetsResponse,
    ApiKey.METADATA: MetadataResponse,
    ApiKey.CREATE_TOPIC: AdminResponse,
    ApiKey.DELETE_TOPIC: AdminResponse,
    ApiKey.OFFSET_COMMIT: OffsetCommitResponse,
    ApiKey.OFFSET_FETCH: OffsetFetchResponse,
}
