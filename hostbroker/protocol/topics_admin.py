"""Codecs of changing a topic on a running broker, of reading its config
overrides and of listing the groups whose offsets it stores
(docs/spec/protocol.md, "Changing topics"): ALTER_TOPIC (19),
LIST_OFFSET_GROUPS (20) and DESCRIBE_TOPIC_CONFIGS (21), all ``api_version`` 0.

ALTER_TOPIC grows a topic's partition count and sets or deletes its config
overrides; LIST_OFFSET_GROUPS names the groups the offsets store holds
(LIST_GROUPS names only those with members), each with the topics it has
committed offsets on, all of them or those asked; DESCRIBE_TOPIC_CONFIGS gives
topics' config overrides (what ``topics describe`` and the console show).

Pure, like the rest of the package, and below
:mod:`hostbroker.protocol.replication`, whose ``decode_any_request`` routes
these keys here. The bodies live in :data:`TOPICS_ADMIN_REQUEST_TYPES` and
:data:`TOPICS_ADMIN_RESPONSE_TYPES`, keyed by ``(api_key, api_version)``;
:func:`hostbroker.protocol.api.decode_request` answers them
UNSUPPORTED_VERSION, as it does every key outside version 0's table.

The codec checks only what no broker could answer otherwise (``check``):
a ``validate_only`` other than 0 or 1 is INVALID_REQUEST (a
:class:`ProtocolError`). Everything that depends on the topic (its name, a
partition count, a config key or value, a key both set and deleted) is the
broker's to answer with an error code and a message.
"""

from __future__ import annotations

from typing import ClassVar

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol.bodies import AdminResponse, ApiKey, TopicConfigEntry
from hostbroker.protocol.primitives import Buffer
from hostbroker.protocol.schema import (
    Array,
    ErrorCodeField,
    Int8,
    Int32,
    String,
    wire_record,
)

__all__ = [
    "ALTER_TOPIC_V0",
    "DESCRIBE_TOPIC_CONFIGS_V0",
    "LIST_OFFSET_GROUPS_V0",
    "PARTITIONS_UNCHANGED",
    "TOPICS_ADMIN_REQUEST_TYPES",
    "TOPICS_ADMIN_RESPONSE_TYPES",
    "AlterTopicRequest",
    "AlterTopicResponse",
    "DescribeTopicConfigsRequest",
    "DescribeTopicConfigsResponse",
    "TopicConfigs",
    "ListOffsetGroupsRequest",
    "ListOffsetGroupsResponse",
    "OffsetGroup",
    "TopicConfigEntry",
    "decode_request",
    "decode_response",
]

ALTER_TOPIC_V0 = 0
LIST_OFFSET_GROUPS_V0 = 0
DESCRIBE_TOPIC_CONFIGS_V0 = 0

# ALTER_TOPIC's ``partitions`` that leaves the count as it is.
PARTITIONS_UNCHANGED = -1


# ALTER_TOPIC (19)


@wire_record
class AlterTopicRequest:
    """Grow ``topic`` to ``partitions`` (-1: unchanged; never fewer than now),
    set ``set_configs`` and delete ``delete_configs`` (back to the broker's
    default), checked whole before anything changes (a failure part-way is
    reported; the same change again completes it). With ``validate_only`` 1 the broker checks
    and answers as it would, changing nothing. A request that changes
    nothing is INVALID_REQUEST."""

    API_KEY: ClassVar[int] = ApiKey.ALTER_TOPIC
    API_VERSION: ClassVar[int] = ALTER_TOPIC_V0
    topic: String
    partitions: Int32 = PARTITIONS_UNCHANGED
    set_configs: Array[TopicConfigEntry] = ()
    delete_configs: Array[String] = ()
    validate_only: Int8 = 0

    def check(self) -> None:
        if self.validate_only not in (0, 1):
            raise ProtocolError(f"ALTER_TOPIC validate_only {self.validate_only} is neither 0 nor 1")

    def changes_nothing(self) -> bool:
        return (self.partitions == PARTITIONS_UNCHANGED and not self.set_configs
                and not self.delete_configs)


# The answer to ALTER_TOPIC: error_code, error_message, as CREATE_TOPIC's.
AlterTopicResponse = AdminResponse


# LIST_OFFSET_GROUPS (20)


@wire_record
class ListOffsetGroupsRequest:
    """The groups of ``groups`` the offsets store holds (empty: every group
    it holds), each with its topics."""

    API_KEY: ClassVar[int] = ApiKey.LIST_OFFSET_GROUPS
    API_VERSION: ClassVar[int] = LIST_OFFSET_GROUPS_V0
    groups: Array[String] = ()

    def check(self) -> None:
        return None


@wire_record
class OffsetGroup:
    """A group with committed offsets, and the topics it has them on, sorted."""

    group: String
    topics: Array[String] = ()


@wire_record
class ListOffsetGroupsResponse:
    """The groups with committed offsets in the broker's offsets store (those
    asked for that it holds, or every one), sorted, members or not, each
    with the topics it has committed offsets on (as LIST_GROUPS' answer:
    ``error_code`` is BROKER_NOT_AVAILABLE while the store cannot be read).
    An answer that would not fit its bound (``response.max.bytes``, and
    ``ring.bytes`` / 16) is cut to its first groups, the last of them
    perhaps to its first topics, and ``truncated`` is 1."""

    error_code: ErrorCodeField
    groups: Array[OffsetGroup] = ()
    truncated: Int8 = 0

    def topics_of(self, group: str) -> tuple[str, ...]:
        """The topics the answer lists for ``group`` (none when not listed)."""
        for entry in self.groups:
            if entry.group == group:
                return entry.topics
        return ()


# DESCRIBE_TOPIC_CONFIGS (21)


@wire_record
class DescribeTopicConfigsRequest:
    """The config overrides of ``topics`` (empty: of every topic)."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_TOPIC_CONFIGS
    API_VERSION: ClassVar[int] = DESCRIBE_TOPIC_CONFIGS_V0
    topics: Array[String] = ()

    def check(self) -> None:
        return None


@wire_record
class TopicConfigs:
    """A topic's overrides of the broker's defaults, sorted by key (only
    the keys set on the topic); ``error_code`` UNKNOWN_TOPIC_OR_PARTITION
    for a topic the broker does not have, STORAGE_ERROR when its config
    cannot be read (``configs`` then empty)."""

    topic: String
    error_code: ErrorCodeField
    configs: Array[TopicConfigEntry] = ()


@wire_record
class DescribeTopicConfigsResponse:
    topics: Array[TopicConfigs] = ()


TopicsAdminRequest = AlterTopicRequest | ListOffsetGroupsRequest | DescribeTopicConfigsRequest
TopicsAdminResponse = AdminResponse | ListOffsetGroupsResponse | DescribeTopicConfigsResponse

TOPICS_ADMIN_REQUEST_TYPES: dict[tuple[int, int], type] = {
    (cls.API_KEY, cls.API_VERSION): cls
    for cls in (AlterTopicRequest, ListOffsetGroupsRequest, DescribeTopicConfigsRequest)
}

TOPICS_ADMIN_RESPONSE_TYPES: dict[tuple[int, int], type] = {
    (ApiKey.ALTER_TOPIC, ALTER_TOPIC_V0): AlterTopicResponse,
    (ApiKey.LIST_OFFSET_GROUPS, LIST_OFFSET_GROUPS_V0): ListOffsetGroupsResponse,
    (ApiKey.DESCRIBE_TOPIC_CONFIGS, DESCRIBE_TOPIC_CONFIGS_V0): DescribeTopicConfigsResponse,
}


def decode_request(frame: Buffer, max_entries: int | None = None
                   ) -> tuple[api.RequestHeader, TopicsAdminRequest]:
    """Header and body of a request of this module (frame without size
    prefix), checked; any other api key or version is UNSUPPORTED_VERSION,
    a bad value INVALID_REQUEST, both as :class:`ProtocolError`."""
    header = api.decode_request_header(frame)
    request_type = TOPICS_ADMIN_REQUEST_TYPES.get((header.api_key, header.api_version))
    if request_type is None:
        raise ProtocolError(
            f"no topic admin request has api_key {header.api_key} version {header.api_version}",
            code=ErrorCode.UNSUPPORTED_VERSION,
        )
    request = api.decode_body(request_type, frame, header.body_offset, max_entries)
    request.check()
    return header, request


def decode_response(frame: Buffer, cls: type) -> tuple[int, TopicsAdminResponse]:
    """``(correlation_id, body)`` of a response frame (without size prefix)
    decoded as ``cls`` (one of :data:`TOPICS_ADMIN_RESPONSE_TYPES`). Check
    :func:`~hostbroker.protocol.api.is_error_frame` first."""
    if cls not in TOPICS_ADMIN_RESPONSE_TYPES.values():
        raise ValueError(f"{cls!r} is not a topic admin response")
    return api.decode_response_as(cls, frame)
