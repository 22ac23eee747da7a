"""Codecs of the consumer group APIs (docs/spec/groups.md): JOIN_GROUP (8),
SYNC_GROUP (9), HEARTBEAT (10), LEAVE_GROUP (11), DESCRIBE_GROUP (12),
LIST_GROUPS (13), all ``api_version`` 0, and OFFSET_COMMIT ``api_version`` 1
(a commit fenced by generation and member id).

The bodies are declared like the others (:mod:`~hostbroker.protocol.bodies`)
but live in their own tables, keyed by ``(api_key, api_version)``:
:data:`GROUP_REQUEST_TYPES` and :data:`GROUP_RESPONSE_TYPES`. Nothing here is
in :data:`~hostbroker.protocol.bodies.REQUEST_TYPES`, so
:func:`hostbroker.protocol.api.decode_request` (what the broker decodes with)
still answers these keys UNSUPPORTED_VERSION. :func:`decode_any_request`
decodes every request of both tables; the broker switches to it once it
serves groups.

Every request's values are checked as it is decoded (:meth:`check` of each
body): a value out of its bounds (an empty group, a member id over
:data:`MAX_MEMBER_ID_BYTES`, a stream count over :data:`MAX_STREAMS_PER_TOPIC`,
a topic named twice...) is a :class:`ProtocolError` with INVALID_REQUEST, so
the broker answers with an error frame, as for any undecodable request.
Limits set by the broker (session timeout range, members per group, topics
per member) are not the codec's: the group state answers them.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol.bodies import (
    ApiKey,
    OffsetCommitPartition,
    OffsetCommitResponse,
    Request,
)
from hostbroker.protocol.primitives import Buffer
from hostbroker.protocol.schema import (
    Array,
    ErrorCodeField,
    Int32,
    String,
    record,
    wire_record,
)

__all__ = [
    "ERROR_FRAME_ONLY_CODES",
    "GROUP_REQUEST_TYPES",
    "GROUP_RESPONSE_TYPES",
    "MAX_GROUP_ID_BYTES",
    "MAX_MEMBER_ID_BYTES",
    "MAX_STREAMS_PER_TOPIC",
    "MAX_TOPIC_BYTES",
    "NO_GENERATION",
    "OFFSET_COMMIT_V1",
    "SHORT_ANSWER_KEYS",
    "DescribeGroupRequest",
    "DescribeGroupResponse",
    "DescribedMember",
    "GroupApiKey",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "OffsetCommitRequestV1",
    "StreamAssignment",
    "SubscribedTopic",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "decode_any_request",
    "decode_group_response",
]


class GroupApiKey(enum.IntEnum):
    JOIN_GROUP = 8
    SYNC_GROUP = 9
    HEARTBEAT = 10
    LEAVE_GROUP = 11
    DESCRIBE_GROUP = 12
    LIST_GROUPS = 13


OFFSET_COMMIT_V1 = 1

# The answers of these requests have an error frame's 6 bytes and layout: a
# client tells them apart by the request it sent, and these codes come only in
# an error frame (docs/spec/groups.md, "HEARTBEAT and LEAVE_GROUP answers look
# like error frames").
SHORT_ANSWER_KEYS = frozenset({GroupApiKey.HEARTBEAT, GroupApiKey.LEAVE_GROUP})
ERROR_FRAME_ONLY_CODES = frozenset({ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST})

# Bounds every request is decoded against (docs/spec/groups.md, "Bounds").
MAX_GROUP_ID_BYTES = 255
MAX_MEMBER_ID_BYTES = 255
MAX_TOPIC_BYTES = 249
MAX_STREAMS_PER_TOPIC = 1024
# The generation of a commit from outside any group generation (OFFSET_COMMIT v1).
NO_GENERATION = -1


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _refuse(message: str) -> None:
    raise ProtocolError(message)


def _check_group(group: str) -> None:
    if not 1 <= _utf8_len(group) <= MAX_GROUP_ID_BYTES:
        _refuse(f"group id must be 1 to {MAX_GROUP_ID_BYTES} bytes")


def _check_member(member_id: str, allow_empty: bool = False) -> None:
    low = 0 if allow_empty else 1
    if not low <= _utf8_len(member_id) <= MAX_MEMBER_ID_BYTES:
        _refuse(f"member id must be {low} to {MAX_MEMBER_ID_BYTES} bytes")


def _check_generation(generation: int) -> None:
    if generation < 0:
        _refuse(f"generation {generation} is negative")


# JOIN_GROUP (8)


@wire_record
class SubscribedTopic:
    topic: String
    streams: Int32


@wire_record
class JoinGroupRequest:
    """``member_id`` is "" for a consumer not yet a member (the broker names it)."""

    API_KEY: ClassVar[int] = GroupApiKey.JOIN_GROUP
    API_VERSION: ClassVar[int] = 0
    group: String
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    member_id: String
    topics: Array[SubscribedTopic]

    def check(self) -> None:
        _check_group(self.group)
        _check_member(self.member_id, allow_empty=True)
        if self.session_timeout_ms < 1:
            _refuse(f"session timeout {self.session_timeout_ms} ms is not positive")
        if self.rebalance_timeout_ms < 1:
            _refuse(f"rebalance timeout {self.rebalance_timeout_ms} ms is not positive")
        if not self.topics:
            _refuse("a member subscribes to at least one topic")
        seen = set()
        for entry in self.topics:
            if not 1 <= _utf8_len(entry.topic) <= MAX_TOPIC_BYTES:
                _refuse(f"topic name must be 1 to {MAX_TOPIC_BYTES} bytes")
            if entry.topic in seen:
                _refuse(f"topic {entry.topic!r} subscribed twice")
            seen.add(entry.topic)
            if not 1 <= entry.streams <= MAX_STREAMS_PER_TOPIC:
                _refuse(f"streams of {entry.topic!r} must be 1 to {MAX_STREAMS_PER_TOPIC}")

    def subscription(self) -> dict[str, int]:
        """``{topic: streams}``, as a ZooKeeper registration holds it."""
        return {entry.topic: entry.streams for entry in self.topics}


@wire_record
class JoinGroupResponse:
    """``generation`` is -1 and ``members`` empty when ``error_code`` is set;
    ``members`` are the member ids of the generation, sorted."""

    error_code: ErrorCodeField
    generation: Int32
    member_id: String
    members: Array[String] = ()


# SYNC_GROUP (9)


@record
class _MemberOfGeneration:
    """The body of SYNC_GROUP and HEARTBEAT: who asks, in which generation."""

    group: String
    generation: Int32
    member_id: String

    def check(self) -> None:
        _check_group(self.group)
        _check_generation(self.generation)
        _check_member(self.member_id)


@wire_record
class SyncGroupRequest(_MemberOfGeneration):
    API_KEY: ClassVar[int] = GroupApiKey.SYNC_GROUP
    API_VERSION: ClassVar[int] = 0


@wire_record
class StreamAssignment:
    """The partitions one stream of the member owns in the generation (maybe none)."""

    topic: String
    stream: Int32
    partitions: Array[Int32]


@wire_record
class SyncGroupResponse:
    """Every stream of the member, by topic then stream index; empty on an error."""

    error_code: ErrorCodeField
    assignment: Array[StreamAssignment] = ()


# HEARTBEAT (10)


@wire_record
class HeartbeatRequest(_MemberOfGeneration):
    API_KEY: ClassVar[int] = GroupApiKey.HEARTBEAT
    API_VERSION: ClassVar[int] = 0


@wire_record
class HeartbeatResponse:
    error_code: ErrorCodeField


# LEAVE_GROUP (11)


@wire_record
class LeaveGroupRequest:
    API_KEY: ClassVar[int] = GroupApiKey.LEAVE_GROUP
    API_VERSION: ClassVar[int] = 0
    group: String
    member_id: String

    def check(self) -> None:
        _check_group(self.group)
        _check_member(self.member_id)


@wire_record
class LeaveGroupResponse:
    error_code: ErrorCodeField


# DESCRIBE_GROUP (12)


@wire_record
class DescribeGroupRequest:
    API_KEY: ClassVar[int] = GroupApiKey.DESCRIBE_GROUP
    API_VERSION: ClassVar[int] = 0
    group: String

    def check(self) -> None:
        _check_group(self.group)


@wire_record
class DescribedMember:
    """One member of the group and its streams in the current generation."""

    member_id: String
    client_id: String
    session_timeout_ms: Int32
    assignment: Array[StreamAssignment] = ()


@wire_record
class DescribeGroupResponse:
    """``phase`` is EMPTY, PREPARING_REBALANCE or STABLE; a group without
    members is EMPTY with generation 0 and no members."""

    error_code: ErrorCodeField
    phase: String
    generation: Int32
    members: Array[DescribedMember] = ()


# LIST_GROUPS (13)


@wire_record
class ListGroupsRequest:
    API_KEY: ClassVar[int] = GroupApiKey.LIST_GROUPS
    API_VERSION: ClassVar[int] = 0

    def check(self) -> None:
        return None


@wire_record
class ListGroupsResponse:
    """The groups that have members, sorted."""

    error_code: ErrorCodeField
    groups: Array[String] = ()


# OFFSET_COMMIT (6) version 1


@wire_record
class OffsetCommitRequestV1:
    """A commit fenced by ``(generation, member_id)``; ``(NO_GENERATION, "")``
    is a commit from outside any generation, as version 0. Answered with
    :class:`~hostbroker.protocol.bodies.OffsetCommitResponse`."""

    API_KEY: ClassVar[int] = ApiKey.OFFSET_COMMIT
    API_VERSION: ClassVar[int] = OFFSET_COMMIT_V1
    group: String
    generation: Int32
    member_id: String
    partitions: Array[OffsetCommitPartition]

    def check(self) -> None:
        _check_group(self.group)
        if self.generation == NO_GENERATION:
            if self.member_id:
                _refuse("a commit with a member id carries its generation")
            return
        _check_generation(self.generation)
        _check_member(self.member_id)


GroupRequest = (
    JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | DescribeGroupRequest
    | ListGroupsRequest
    | OffsetCommitRequestV1
)

GroupResponse = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | DescribeGroupResponse
    | ListGroupsResponse
    | OffsetCommitResponse
)

GROUP_REQUEST_TYPES: dict[tuple[int, int], type] = {
    (cls.API_KEY, cls.API_VERSION): cls
    for cls in (
        JoinGroupRequest,
        SyncGroupRequest,
        HeartbeatRequest,
        LeaveGroupRequest,
        DescribeGroupRequest,
        ListGroupsRequest,
        OffsetCommitRequestV1,
    )
}

GROUP_RESPONSE_TYPES: dict[tuple[int, int], type] = {
    (GroupApiKey.JOIN_GROUP, 0): JoinGroupResponse,
    (GroupApiKey.SYNC_GROUP, 0): SyncGroupResponse,
    (GroupApiKey.HEARTBEAT, 0): HeartbeatResponse,
    (GroupApiKey.LEAVE_GROUP, 0): LeaveGroupResponse,
    (GroupApiKey.DESCRIBE_GROUP, 0): DescribeGroupResponse,
    (GroupApiKey.LIST_GROUPS, 0): ListGroupsResponse,
    (ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_V1): OffsetCommitResponse,
}


def decode_any_request(
    frame: Buffer, max_entries: int | None = None
) -> tuple[api.RequestHeader, Request | GroupRequest]:
    """Header and body of a request frame (without size prefix), the group
    APIs and OFFSET_COMMIT v1 included; anything else as
    :func:`~hostbroker.protocol.api.decode_request` decodes it. A group
    request whose values break their bounds is INVALID_REQUEST."""
    header = api.decode_request_header(frame)
    request_type = GROUP_REQUEST_TYPES.get((header.api_key, header.api_version))
    if request_type is None:
        return header, api.decode_request_body(header, frame, max_entries)
    request = api.decode_body(request_type, frame, header.body_offset, max_entries)
    request.check()
    return header, request


def decode_group_response(api_key: int, api_version: int, frame: Buffer) -> tuple[int, GroupResponse]:
    """``(correlation_id, body)`` of the answer to a group request or an
    OFFSET_COMMIT v1 (frame without size prefix; check for an error frame first)."""
    response_type = GROUP_RESPONSE_TYPES.get((api_key, api_version))
    if response_type is None:
        raise ProtocolError(
            f"no group answer for api_key {api_key} version {api_version}",
            code=ErrorCode.UNSUPPORTED_VERSION,
        )
    return api.decode_response_as(response_type, frame)
