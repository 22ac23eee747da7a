"""Codecs of replicas across log dirs (docs/spec/protocol.md, "Replicas across
log dirs"): METADATA v2, CREATE_TOPIC v1, ALTER_REPLICA_DIRS (17) and
LOG_DIR_ADMIN (18).

A standalone broker may keep a partition's replicas on several of its own log
dirs, each replica named by its *log dir id* (a small stable integer kept in
the dir). METADATA v2 shows those replicas, the ISR and any reassignment
target by dir id, and the broker's log dirs with their state; CREATE_TOPIC v1
adds a replication factor; ALTER_REPLICA_DIRS moves replicas between dirs;
LOG_DIR_ADMIN brings a dir back online or forgets a dead one.

Pure, like the rest of the package, and below
:mod:`hostbroker.protocol.replication`, whose ``decode_any_request`` routes
these keys and versions here. Bodies live in
:data:`LOGDIRS_REQUEST_TYPES` and :data:`LOGDIRS_RESPONSE_TYPES`, keyed by
``(api_key, api_version)``; :func:`hostbroker.protocol.api.decode_request`
still answers them UNSUPPORTED_VERSION, so version 0 stays exactly as it was.

Every request and response is checked as it is decoded (``check``): a dir id
list longer than :data:`MAX_REPLICAS` is refused at its count; a dir id out
of range, a dir named twice, an ISR outside the replicas, a partition named
twice, an unknown action or log dir state, a replication factor outside -1
and 1 to 8 are INVALID_REQUEST (a :class:`ProtocolError`). What depends on
the broker (how many dirs are usable, whether a dir is known) is answered
with an error code, not here.
"""

from __future__ import annotations

from typing import ClassVar

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol.bodies import AdminResponse, ApiKey, MetadataBroker, TopicConfigEntry
from hostbroker.protocol.controller_requests import PartitionError
from hostbroker.protocol.primitives import Buffer
from hostbroker.protocol.replica_fields import (
    MAX_REPLICAS,
    NO_LEADER,
    ReplicaIds,
    check_partition,
    refuse,
)
from hostbroker.protocol.schema import (
    Array,
    ErrorCodeField,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
    wire_record,
)

__all__ = [
    "ACTION_FORGET",
    "ACTION_ONLINE",
    "ALTER_REPLICA_DIRS_V0",
    "CREATE_TOPIC_V1",
    "DEFAULT_REPLICATION_FACTOR",
    "DIR_MISSING",
    "DIR_OFFLINE",
    "DIR_ONLINE",
    "LOGDIRS_REQUEST_TYPES",
    "LOGDIRS_RESPONSE_TYPES",
    "LOG_DIR_ADMIN_V0",
    "MAX_DIR_ID",
    "MAX_REPLICAS",
    "METADATA_V2",
    "NO_DIR",
    "AlterReplicaDirsPartition",
    "AlterReplicaDirsRequest",
    "AlterReplicaDirsResponse",
    "CreateTopicRequestV1",
    "LogDirAdminRequest",
    "LogDirAdminResponse",
    "MetadataLogDir",
    "MetadataPartitionV2",
    "MetadataRequestV2",
    "MetadataResponseV2",
    "MetadataTopicV2",
    "PartitionError",
    "check_dir_id",
    "decode_request",
    "decode_response",
]

METADATA_V2 = 2
CREATE_TOPIC_V1 = 1
ALTER_REPLICA_DIRS_V0 = 0
LOG_DIR_ADMIN_V0 = 0

# CREATE_TOPIC v1's replication_factor that asks for default.replication.factor.
DEFAULT_REPLICATION_FACTOR = -1
# Log dir ids: 1 to 2^31-1 (docs/storage.md); -1 in a leader field or a
# request's unused dir id: none.
MAX_DIR_ID = 2**31 - 1
NO_DIR = NO_LEADER

# METADATA v2's log dir states
DIR_ONLINE = 0
DIR_OFFLINE = 1
DIR_MISSING = 2  # named by the replication state, not configured or not readable
_DIR_STATES = (DIR_ONLINE, DIR_OFFLINE, DIR_MISSING)

# LOG_DIR_ADMIN's actions
ACTION_ONLINE = 0  # bring the configured dir at ``path`` back (or a new disk there)
ACTION_FORGET = 1  # consent to lose what only the dir ``dir_id`` may hold
_ACTIONS = (ACTION_ONLINE, ACTION_FORGET)


def check_dir_id(value: int, what: str, allow_none: bool = False) -> None:
    """A log dir id (1 to 2^31-1), or with ``allow_none`` also -1; else INVALID_REQUEST."""
    if allow_none and value == NO_DIR:
        return
    if not 1 <= value <= MAX_DIR_ID:
        refuse(f"{what} {value} is not a log dir id")


def _check_distinct(ids: tuple[int, ...], what: str) -> None:
    if len(set(ids)) != len(ids):
        refuse(f"{what} name a log dir twice")


# METADATA (3) version 2


@wire_record
class MetadataRequestV2:
    """An empty ``topics`` asks for every topic (the body of versions 0 and 1)."""

    API_KEY: ClassVar[int] = ApiKey.METADATA
    API_VERSION: ClassVar[int] = METADATA_V2
    topics: Array[String] = ()

    def check(self) -> None:
        return None


@wire_record
class MetadataPartitionV2:
    """Version 1's partition, then the replicas by log dir id: ``leader_dir``
    (-1: no leader), ``replica_dirs``, ``isr_dirs`` and ``target_dirs`` (empty
    unless a reassignment is under way). A partition that is not dir-placed
    has ``leader_dir`` = ``replica_dirs[0]`` = ``isr_dirs[0]`` = its dir's id."""

    partition: Int32
    error_code: ErrorCodeField
    leader: Int32
    leader_epoch: Int32
    replicas: ReplicaIds
    isr: ReplicaIds
    log_start_offset: Int64
    high_watermark: Int64
    log_dir: NullableString
    leader_dir: Int32
    replica_dirs: ReplicaIds
    isr_dirs: ReplicaIds
    target_dirs: ReplicaIds


@wire_record
class MetadataTopicV2:
    topic: String
    error_code: ErrorCodeField
    partitions: Array[MetadataPartitionV2]


@wire_record
class MetadataLogDir:
    """One log dir of the answering broker; ``path`` may be null for a dir
    that is ``DIR_MISSING`` (known only by its id), and ``dir_id`` -1 for a
    configured dir without an id (it holds no replicas across log dirs)."""

    dir_id: Int32
    path: NullableString
    state: Int8


@wire_record
class MetadataResponseV2:
    """Version 1's answer, each partition with its dirs, then this broker's log dirs."""

    broker_id: Int32
    controller_id: Int32
    brokers: Array[MetadataBroker]
    topics: Array[MetadataTopicV2]
    log_dirs: Array[MetadataLogDir]

    def check(self) -> None:
        for topic in self.topics:
            for p in topic.partitions:
                where = f"{topic.topic[:80]!r} {p.partition}"
                if len(set(p.replicas)) != len(p.replicas) or not set(p.isr) <= set(p.replicas):
                    refuse(f"replicas and ISR of {where} do not agree")
                _check_distinct(p.replica_dirs, f"the replica dirs of {where}")
                _check_distinct(p.target_dirs, f"the target dirs of {where}")
                if len(set(p.isr_dirs)) != len(p.isr_dirs) \
                        or not set(p.isr_dirs) <= set(p.replica_dirs):
                    refuse(f"replica dirs and ISR dirs of {where} do not agree")
                if p.leader_dir != NO_DIR and p.leader_dir not in p.replica_dirs:
                    refuse(f"leader dir {p.leader_dir} of {where} is not among its replica dirs")
        seen: set[int] = set()
        for d in self.log_dirs:
            # (-1: a configured dir without an id, as every dir of a one-dir broker)
            check_dir_id(d.dir_id, "log dir id", allow_none=d.state != DIR_MISSING)
            if d.dir_id != NO_DIR:
                if d.dir_id in seen:
                    refuse(f"log dir id {d.dir_id} listed twice")
                seen.add(d.dir_id)
            if d.state not in _DIR_STATES:
                refuse(f"log dir {d.dir_id} has an unknown state {d.state}")
            if d.path is None and d.state != DIR_MISSING:
                refuse(f"log dir {d.dir_id} has no path but is not missing")


# CREATE_TOPIC (4) version 1


@wire_record
class CreateTopicRequestV1:
    """Version 0's fields, then ``replication_factor``: 1 to 8 replicas, each
    on its own log dir of this broker, or -1 for ``default.replication.factor``.
    The answer is version 0's (:class:`~hostbroker.protocol.bodies.AdminResponse`)."""

    API_KEY: ClassVar[int] = ApiKey.CREATE_TOPIC
    API_VERSION: ClassVar[int] = CREATE_TOPIC_V1
    topic: String
    partitions: Int32
    configs: Array[TopicConfigEntry] = ()
    replication_factor: Int16 = DEFAULT_REPLICATION_FACTOR

    def check(self) -> None:
        rf = self.replication_factor
        if rf != DEFAULT_REPLICATION_FACTOR and not 1 <= rf <= MAX_REPLICAS:
            refuse(f"replication factor {rf} is neither -1 (the default) "
                   f"nor 1 to {MAX_REPLICAS}")


# ALTER_REPLICA_DIRS (17)


@wire_record
class AlterReplicaDirsPartition:
    """The dirs a partition's replicas are to be on; the first is the preferred leader."""

    topic: String
    partition: Int32
    dir_ids: ReplicaIds


@wire_record
class AlterReplicaDirsRequest:
    API_KEY: ClassVar[int] = ApiKey.ALTER_REPLICA_DIRS
    API_VERSION: ClassVar[int] = ALTER_REPLICA_DIRS_V0
    partitions: Array[AlterReplicaDirsPartition]

    def check(self) -> None:
        seen: set = set()
        for p in self.partitions:
            check_partition(p.topic, p.partition, seen, "an ALTER_REPLICA_DIRS")
            where = f"{p.topic[:80]!r} {p.partition}"
            if not p.dir_ids:
                refuse(f"no log dir named for {where}")
            for dir_id in p.dir_ids:
                check_dir_id(dir_id, f"log dir of {where}")
            _check_distinct(p.dir_ids, f"the dirs of {where}")


@wire_record
class AlterReplicaDirsResponse:
    """``error_code`` is the request's (a reassignment already in progress:
    INVALID_REQUEST, nothing changed); ``partitions`` each partition's own."""

    error_code: ErrorCodeField
    error_message: NullableString
    partitions: Array[PartitionError]

    def check(self) -> None:
        return None


# LOG_DIR_ADMIN (18)


@wire_record
class LogDirAdminRequest:
    """``ACTION_ONLINE``: the configured log dir at ``path`` is to come back
    (``dir_id`` -1); ``ACTION_FORGET``: the dir ``dir_id`` is gone for good
    (``path`` null or empty)."""

    API_KEY: ClassVar[int] = ApiKey.LOG_DIR_ADMIN
    API_VERSION: ClassVar[int] = LOG_DIR_ADMIN_V0
    action: Int8
    path: NullableString
    dir_id: Int32

    def check(self) -> None:
        if self.action == ACTION_ONLINE:
            if not self.path:
                refuse("LOG_DIR_ADMIN online names no path")
            if "\0" in self.path:
                refuse("LOG_DIR_ADMIN online: the path holds a NUL byte")
            if self.dir_id != NO_DIR:
                refuse(f"LOG_DIR_ADMIN online takes dir id -1, not {self.dir_id}")
        elif self.action == ACTION_FORGET:
            check_dir_id(self.dir_id, "LOG_DIR_ADMIN forget: dir id")
            if self.path:
                refuse("LOG_DIR_ADMIN forget takes no path")
        else:
            refuse(f"LOG_DIR_ADMIN action {self.action} is neither 0 (online) nor 1 (forget)")


# The answer to LOG_DIR_ADMIN: error_code, error_message, as CREATE_TOPIC's.
LogDirAdminResponse = AdminResponse


LogDirsRequest = (
    MetadataRequestV2 | CreateTopicRequestV1 | AlterReplicaDirsRequest | LogDirAdminRequest
)
LogDirsResponse = MetadataResponseV2 | AdminResponse | AlterReplicaDirsResponse

LOGDIRS_REQUEST_TYPES: dict[tuple[int, int], type] = {
    (cls.API_KEY, cls.API_VERSION): cls
    for cls in (MetadataRequestV2, CreateTopicRequestV1, AlterReplicaDirsRequest,
                LogDirAdminRequest)
}

LOGDIRS_RESPONSE_TYPES: dict[tuple[int, int], type] = {
    (ApiKey.METADATA, METADATA_V2): MetadataResponseV2,
    (ApiKey.CREATE_TOPIC, CREATE_TOPIC_V1): AdminResponse,
    (ApiKey.ALTER_REPLICA_DIRS, ALTER_REPLICA_DIRS_V0): AlterReplicaDirsResponse,
    (ApiKey.LOG_DIR_ADMIN, LOG_DIR_ADMIN_V0): LogDirAdminResponse,
}


def decode_request(frame: Buffer, max_entries: int | None = None
                   ) -> tuple[api.RequestHeader, LogDirsRequest]:
    """Header and body of a request of this module (frame without size
    prefix), checked; any other api key or version is UNSUPPORTED_VERSION,
    any bad value INVALID_REQUEST, both as :class:`ProtocolError`."""
    header = api.decode_request_header(frame)
    request_type = LOGDIRS_REQUEST_TYPES.get((header.api_key, header.api_version))
    if request_type is None:
        raise ProtocolError(
            f"no log dirs request has api_key {header.api_key} version {header.api_version}",
            code=ErrorCode.UNSUPPORTED_VERSION,
        )
    request = api.decode_body(request_type, frame, header.body_offset, max_entries)
    request.check()
    return header, request


def decode_response(frame: Buffer, cls: type) -> tuple[int, LogDirsResponse]:
    """``(correlation_id, body)`` of a response frame (without size prefix)
    decoded as ``cls`` (one of :data:`LOGDIRS_RESPONSE_TYPES`), checked where
    the body has checks. Check :func:`~hostbroker.protocol.api.is_error_frame` first."""
    if cls not in LOGDIRS_RESPONSE_TYPES.values():
        raise ValueError(f"{cls!r} is not a log dirs response")
    correlation_id, response = api.decode_response_as(cls, frame)
    check = getattr(response, "check", None)
    if check is not None:
        check()
    return correlation_id, response
