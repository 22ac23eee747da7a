"""A PRODUCE or a FETCH of one partition, and a PRODUCE's answer, read and
written in a few struct calls: what a processor and a writer do for every
synchronous one-partition produce (a PUT), and a processor for every
one-partition fetch it answers itself, where the schema codec's generality
costs a good part of the request.

Owns: :func:`peek_lone_produce` and :func:`peek_lone_fetch`, which read such
a request exactly as :func:`hostbroker.protocol.api.decode_request` would
(they return None for every frame that function refuses, and for every
other kind of frame); :func:`fetch_partition_count`, which tells a FETCH of
a few partitions (a processor answers those too) from its first bytes; and
:func:`encode_lone_produce_answer`, whose frames are byte for byte those of
:func:`hostbroker.protocol.api.encode_answer` for a one-partition
ProduceResponse. ``tests/protocol/test_lone.py`` holds all four to that.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from hostbroker.protocol import api

# api_key, api_version, correlation_id, client_id's length
_HEAD = struct.Struct(">hhih")
# acks, timeout_ms, the partitions' count, the topic's length
_BODY = struct.Struct(">hiih")
# partition, the message set's length
_PART = struct.Struct(">ii")
# max_wait_ms, min_bytes, the partitions' count, the topic's length
_FETCH_BODY = struct.Struct(">iiih")
# partition, offset, max_bytes
_FETCH_PART = struct.Struct(">iqi")
# max_wait_ms, min_bytes, the partitions' count
_FETCH_COUNT = struct.Struct(">iii")
# size, correlation_id, the partitions' count (1), the topic's length
_ANSWER_HEAD = struct.Struct(">iiih")
# partition, error_code, base_offset, log_end_offset
_ANSWER_TAIL = struct.Struct(">ihqq")
_ANSWER_FIXED = _ANSWER_HEAD.size + _ANSWER_TAIL.size


class LoneProduce(NamedTuple):
    correlation_id: int
    acks: int
    timeout_ms: int
    topic: str
    partition: int
    message_set: memoryview  # a slice of the frame


def _head(frame, key: int, body_size: int,
          version: int = api.API_VERSION) -> tuple[int, int, int] | None:
    """``(correlation_id, the client id's length, where the body starts)`` of
    a request frame of ``key`` and ``version`` with at least ``body_size``
    bytes of body; None for any other frame."""
    size = len(frame)
    if size < _HEAD.size + body_size:
        return None
    key_read, version_read, correlation_id, client_id_length = _HEAD.unpack_from(frame, 0)
    if key_read != key or version_read != version or client_id_length < -1:
        return None
    body = _HEAD.size + max(client_id_length, 0)
    if body + body_size > size:
        return None
    return correlation_id, client_id_length, body


def _body(frame, key: int, body_struct: struct.Struct, part_struct: struct.Struct,
          max_entries: int | None, version: int = api.API_VERSION):
    """Where a request of ``key`` with one partition has its fields:
    ``(correlation_id, body fields, topic, part fields, part end)``, the body
    fields being ``body_struct``'s before the partitions' count and the
    topic's length (the count must be 1), and the part fields
    ``part_struct``'s after the topic; None when the frame is no such
    request, or one ``decode_request`` refuses for what is read here (the
    caller checks what follows the part)."""
    if max_entries is not None and max_entries < 1:
        return None
    head = _head(frame, key, body_struct.size, version)
    if head is None:
        return None
    correlation_id, client_id_length, body = head
    size = len(frame)
    *fields, count, topic_length = body_struct.unpack_from(frame, body)
    topic_at = body + body_struct.size
    part_at = topic_at + topic_length
    part_end = part_at + part_struct.size
    if count != 1 or topic_length < 0 or part_end > size:
        return None
    view = memoryview(frame)
    try:
        if client_id_length > 0:
            str(view[_HEAD.size:body], "utf-8")
        topic = str(view[topic_at:part_at], "utf-8")
    except UnicodeDecodeError:
        return None
    return correlation_id, fields, topic, part_struct.unpack_from(frame, part_at), part_end


def peek_lone_produce(frame, max_entries: int | None = None,
                      version: int = api.API_VERSION) -> LoneProduce | None:
    """The fields of a PRODUCE request frame (without its size prefix) of
    ``version`` (0, or 1: the same body) and exactly one partition, or None:
    for any other request, and for any frame whose body ``decode_request(frame,
    max_entries)`` would refuse (read as version 0's)."""
    found = _body(frame, api.ApiKey.PRODUCE, _BODY, _PART, max_entries, version)
    if found is None:
        return None
    correlation_id, (acks, timeout_ms), topic, (partition, set_length), set_at = found
    if set_length < 0 or set_at + set_length != len(frame):
        return None
    return LoneProduce(correlation_id, acks, timeout_ms, topic, partition,
                       memoryview(frame)[set_at:])


class LoneFetch(NamedTuple):
    correlation_id: int
    max_wait_ms: int
    min_bytes: int
    topic: str
    partition: int
    offset: int
    max_bytes: int


def peek_lone_fetch(frame, max_entries: int | None = None,
                    version: int = api.API_VERSION) -> LoneFetch | None:
    """The fields of a FETCH request frame (without its size prefix) of
    ``version`` (0, or 2: the same body) and exactly one partition, or None:
    for any other request, and for any frame whose body ``decode_request(frame,
    max_entries)`` would refuse (read as version 0's)."""
    found = _body(frame, api.ApiKey.FETCH, _FETCH_BODY, _FETCH_PART, max_entries, version)
    if found is None:
        return None
    correlation_id, (max_wait_ms, min_bytes), topic, part, end = found
    if end != len(frame):
        return None
    return LoneFetch(correlation_id, max_wait_ms, min_bytes, topic, *part)


def fetch_partition_count(frame, version: int = api.API_VERSION) -> int | None:
    """The partitions' count a FETCH request frame of ``version`` (without
    its size prefix) gives, None for any other frame and for one too short to give
    it. Nothing past the count is read or checked: a caller that takes the
    request decodes it (:func:`hostbroker.protocol.api.decode_request`)."""
    head = _head(frame, api.ApiKey.FETCH, _FETCH_COUNT.size, version)
    return None if head is None else _FETCH_COUNT.unpack_from(frame, head[2])[2]


def encode_lone_produce_answer(correlation_id: int, topic: str, partition: int, code: int,
                               base_offset: int, log_end_offset: int,
                               max_bytes: int) -> tuple[bytes, bool]:
    """What ``api.encode_answer(correlation_id, ProduceResponse((ProducePartitionResult(
    topic, partition, code, base_offset, log_end_offset),)), max_bytes)`` gives:
    ``(frame, is_error)``. Never raises."""
    try:
        name = topic.encode("utf-8")
        if len(name) <= 0x7FFF and len(name) + _ANSWER_FIXED <= max_bytes:
            return (_ANSWER_HEAD.pack(len(name) + _ANSWER_FIXED - 4, correlation_id, 1, len(name))
                    + name + _ANSWER_TAIL.pack(partition, code, base_offset, log_end_offset),
                    False)
    except (struct.error, UnicodeError, TypeError, AttributeError):
        pass
    # anything out of range or too long: the general encoder says what it is
    return api.encode_answer(correlation_id, api.ProduceResponse((api.ProducePartitionResult(
        topic, partition, code, base_offset, log_end_offset),)), max_bytes)
