"""The protocol in one namespace: whole frames to bytes and back (docs/spec/protocol.md, "Framing").

Callers write ``api.decode_request(frame)``, ``api.ProduceRequest(...)``,
``api.HeaderTooShortError``: the frame functions are defined here, the bodies
(:mod:`~hostbroker.protocol.bodies`) and protocol errors are re-exported.

Encoders return the complete frame, size prefix included. Decoders take a
frame *without* its size prefix (as :class:`~hostbroker.protocol.framing.FrameReader`
hands it out) and either return the decoded body or raise
:class:`ProtocolError`; never anything else, whatever the input. The code on a
raised error is the one the broker puts in its error frame:

- ``UNSUPPORTED_VERSION``: an unknown ``api_key`` or an ``api_version``
  other than 0 (the group APIs 8-11 and OFFSET_COMMIT v1 included: only
  :func:`hostbroker.protocol.groups.decode_any_request` decodes those; the
  replication and log dirs APIs and versions, 14-18, METADATA v1 and v2,
  FETCH v1, CREATE_TOPIC v1: only
  :func:`hostbroker.protocol.replication.decode_any_request`);
- ``INVALID_REQUEST``: a body that runs past its frame, bytes left over, a
  count that cannot fit, a null where a value is required, invalid UTF-8;
- :class:`HeaderTooShortError` (also ``INVALID_REQUEST``): no room for a
  correlation id, so there is nobody to answer: close without one.

Error frames are ``size:int32 = 6, correlation_id:int32, error_code:int16``.
No normal response is that short (the smallest, an empty PRODUCE/FETCH/
OFFSET_COMMIT/OFFSET_FETCH answer or an admin answer, is 8 bytes), so a reader
of responses recognises an error frame by its size alone: see
:func:`is_error_frame`.

The broker's fetch path never copies message data into a frame:
:func:`encode_fetch_response_parts` gives the header chunks that go around
data sent with ``sendfile``. A producer's message sets are not copied into
its request either: :func:`encode_produce_request_parts` gives the frame as a
list of buffers for one ``sendmsg``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import bodies
from hostbroker.protocol.bodies import *  # noqa: F403 (re-exported: one namespace)
from hostbroker.protocol.bodies import (
    API_VERSION,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    ApiKey,
    Request,
    Response,
)
from hostbroker.protocol.errors import FrameTooLargeError, HeaderTooShortError
from hostbroker.protocol.primitives import Buffer, Reader, Writer
from hostbroker.protocol.schema import error_code

__all__ = [
    *bodies.__all__,
    "ERROR_FRAME_SIZE",
    "MAX_ECHOED_TEXT",
    "SIZE_PREFIX_BYTES",
    "FetchPartitionHeader",
    "FrameTooLargeError",
    "HeaderTooShortError",
    "ProtocolError",
    "RequestHeader",
    "decode_error_frame",
    "decode_request",
    "decode_body",
    "decode_request_body",
    "decode_request_header",
    "decode_response",
    "decode_response_as",
    "clip_text",
    "encode_answer",
    "encode_error_frame",
    "encode_fetch_response_parts",
    "fetch_part_emptied",
    "frame_shrunk",
    "encode_produce_request_parts",
    "encode_request",
    "encode_response",
    "is_error_frame",
    "peek_correlation_id",
    "peek_produce_acks",
]

SIZE_PREFIX_BYTES = 4
ERROR_FRAME_SIZE = 6
# Longest error message (UTF-8 bytes) the broker puts in an answer: see clip_text.
MAX_ECHOED_TEXT = 1024
MAX_FRAME_SIZE = 2**31 - 1

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_ERROR_FRAME = struct.Struct(">iih")  # size, correlation_id, error_code
_ERROR_BODY = struct.Struct(">ih")  # correlation_id, error_code
_INT16 = struct.Struct(">h")

# Bytes of a request header before client_id's characters: api_key,
# api_version, correlation_id and client_id's length.
_HEADER_MIN = _HEADER_FIXED.size + 2


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The request header; the body starts at ``body_offset`` of the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


class FetchPartitionHeader(NamedTuple):
    """One partition of a fetch answer whose ``data_length`` bytes are sent apart."""

    topic: str
    partition: int
    error_code: int
    log_end_offset: int
    data_length: int


def _finish(writer: Writer) -> bytes:
    writer.patch_int32(0, len(writer) - SIZE_PREFIX_BYTES)
    return writer.getvalue()


def _encode(fill: Callable[[Writer], None]) -> bytes:
    """Run ``fill(writer)`` after a size placeholder and return the whole frame.

    A value that does not fit its wire type (an int out of range, a string over
    32767 bytes) is a ValueError of the caller, not a protocol error.
    """
    writer = Writer()
    writer.int32(0)
    try:
        fill(writer)
    except struct.error as exc:
        raise ValueError(f"value does not fit its wire type: {exc}") from None
    return _finish(writer)


def encode_request(request: Request, correlation_id: int, client_id: str | None = "") -> bytes:
    """The frame of ``request``, size prefix included."""

    def fill(writer: Writer) -> None:
        writer.int16(request.API_KEY)
        writer.int16(getattr(request, "API_VERSION", API_VERSION))
        writer.int32(correlation_id)
        writer.string(client_id)
        type(request).__wire__.write(writer, request)

    return _encode(fill)


def _with_size(chunks: list, total: int) -> list:
    """``chunks`` with the size prefix at the start of the first one set for ``total`` bytes.

    ValueError when the frame would be larger than its int32 size can say."""
    if total - SIZE_PREFIX_BYTES > MAX_FRAME_SIZE:
        raise ValueError(f"a frame of {total} bytes does not fit its int32 size")
    first = bytearray(chunks[0])
    _SIZE.pack_into(first, 0, total - SIZE_PREFIX_BYTES)
    chunks[0] = bytes(first)
    return chunks


def encode_produce_request_parts(
    acks: int,
    timeout_ms: int,
    partitions: Sequence[tuple[str, int, Sequence[Buffer]]],
    correlation_id: int,
    client_id: str | None = "",
    api_version: int = API_VERSION,
) -> list[Buffer]:
    """A PRODUCE request's frame as buffers whose concatenation is the frame
    (``api_version`` 1: PRODUCE v1, the same body, its answer carrying a throttle time).

    Each partition is ``(topic, partition, message sets)``; its sets go on
    the wire back to back as that partition's one message set, and appear in
    the result as the very objects given (no copy). The other buffers are
    the small headers between them, size prefix first. Joined, the result
    equals ``encode_request`` of the ProduceRequest with each partition's
    sets joined.
    """
    parts: list[Buffer] = []
    total = 0
    writer = Writer()
    writer.int32(0)  # the size, patched below
    try:
        writer.int16(ApiKey.PRODUCE)
        writer.int16(api_version)
        writer.int32(correlation_id)
        writer.string(client_id)
        writer.int16(acks)
        writer.int32(timeout_ms)
        writer.int32(len(partitions))
        for topic, partition, sets in partitions:
            writer.string(topic)
            writer.int32(partition)
            set_bytes = sum(map(len, sets))
            writer.int32(set_bytes)
            header = writer.getvalue()
            parts.append(header)
            parts.extend(sets)
            total += len(header) + set_bytes
            writer = Writer()
    except struct.error as exc:
        raise ValueError(f"value does not fit its wire type: {exc}") from None
    if len(writer):  # no partitions: the header is still open
        header = writer.getvalue()
        parts.append(header)
        total += len(header)
    return _with_size(parts, total)


def encode_response(correlation_id: int, response: Response) -> bytes:
    """The frame of ``response``, size prefix included."""

    def fill(writer: Writer) -> None:
        writer.int32(correlation_id)
        type(response).__wire__.write(writer, response)

    return _encode(fill)


def clip_text(text: str | None, max_bytes: int = MAX_ECHOED_TEXT) -> str | None:
    """``text`` cut to at most ``max_bytes`` of UTF-8 (on a character boundary),
    marked with "..." when cut: for error messages, which may echo what a
    request held, so that they always fit a string field."""
    if text is None:
        return None
    encoded = text.encode("utf-8", "replace")  # a lone surrogate becomes "?"
    if len(encoded) <= max_bytes:
        return encoded.decode("utf-8")
    return encoded[:max_bytes - 3].decode("utf-8", "ignore") + "..."


def encode_answer(correlation_id: int, response: Response, max_bytes: int) -> tuple[bytes, bool]:
    """``(frame, is_error)``: the frame of ``response`` when it is encodable and at
    most ``max_bytes`` long (size prefix included), else an error frame
    (INVALID_REQUEST) after which the connection is to close. Never raises,
    whatever the response holds."""
    try:
        frame = encode_response(correlation_id, response)
    except (ValueError, TypeError, OverflowError, UnicodeError):
        frame = None
    if frame is None or len(frame) > max_bytes:
        return encode_error_frame(correlation_id, ErrorCode.INVALID_REQUEST), True
    return frame, False


def encode_error_frame(correlation_id: int, code: ErrorCode | int) -> bytes:
    """The 6-byte error frame (plus its size prefix) for a request that cannot be decoded."""
    return _ERROR_FRAME.pack(ERROR_FRAME_SIZE, correlation_id, code)


def is_error_frame(frame: Buffer) -> bool:
    """Whether a response frame (without size prefix) is an error frame."""
    return len(frame) == ERROR_FRAME_SIZE


def decode_error_frame(frame: Buffer) -> tuple[int, ErrorCode | int]:
    """``(correlation_id, error_code)`` of an error frame (without size prefix)."""
    if not is_error_frame(frame):
        raise ProtocolError(f"an error frame has {ERROR_FRAME_SIZE} bytes, not {len(frame)}")
    correlation_id, code = _ERROR_BODY.unpack(frame)
    return correlation_id, error_code(code)


def peek_correlation_id(frame: Buffer) -> int | None:
    """The correlation id of a request frame, or None when it is too short to hold one."""
    if len(frame) < _HEADER_FIXED.size:
        return None
    return _HEADER_FIXED.unpack_from(frame)[2]


def peek_produce_acks(frame: Buffer) -> int | None:
    """``acks`` of a PRODUCE v0 request frame; None for any other frame or one too short.

    Lets the network code know, without decoding the body, that a request
    (acks = 0) will have no answer and holds no place in the answer order.
    """
    if len(frame) < _HEADER_MIN:
        return None
    api_key, api_version, _ = _HEADER_FIXED.unpack_from(frame)
    if api_key != ApiKey.PRODUCE or api_version != API_VERSION:
        return None
    (client_id_length,) = _INT16.unpack_from(frame, _HEADER_FIXED.size)
    acks_at = _HEADER_MIN + max(client_id_length, 0)
    if client_id_length < -1 or len(frame) < acks_at + 2:
        return None
    return _INT16.unpack_from(frame, acks_at)[0]


def decode_request_header(frame: Buffer) -> RequestHeader:
    """The header of a request frame (without size prefix).

    Raises HeaderTooShortError when the frame cannot hold a correlation id,
    ProtocolError when the client id is truncated or malformed. Does not check
    that the api is supported (:func:`decode_request` does).
    """
    if len(frame) < _HEADER_FIXED.size:
        raise HeaderTooShortError(f"request header of {len(frame)} bytes has no correlation id")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(frame)
    reader = Reader(frame, _HEADER_FIXED.size)
    client_id = reader.string()
    return RequestHeader(api_key, api_version, correlation_id, client_id, reader.position)


def decode_request(frame: Buffer, max_entries: int | None = None) -> tuple[RequestHeader, Request]:
    """Header and body of a request frame (without size prefix).

    Message sets in the body are zero-copy slices of ``frame``. With
    ``max_entries``, a body whose arrays hold more items than that, all
    together, is a ProtocolError (INVALID_REQUEST), raised at the count.
    """
    header = decode_request_header(frame)
    return header, decode_request_body(header, frame, max_entries)


def decode_request_body(header: RequestHeader, frame: Buffer,
                        max_entries: int | None = None) -> Request:
    """The body of a request frame whose ``header`` is decoded already (what
    :func:`decode_request` does after the header, errors included)."""
    request_type = REQUEST_TYPES.get(header.api_key)
    if request_type is None or header.api_version != API_VERSION:
        raise ProtocolError(
            f"unsupported api_key {header.api_key} version {header.api_version}",
            code=ErrorCode.UNSUPPORTED_VERSION,
        )
    return decode_body(request_type, frame, header.body_offset, max_entries)


def decode_body(body_type: type, frame: Buffer, offset: int, max_entries: int | None = None):
    """A ``body_type`` (a wire struct) that fills ``frame`` from ``offset`` to its end."""
    reader = Reader(frame, offset, max_entries)
    body = body_type.__wire__.read(reader)
    reader.expect_end()
    return body


def decode_response(api_key: int, frame: Buffer) -> tuple[int, Response]:
    """``(correlation_id, body)`` of a response to an ``api_key`` request (frame without size prefix).

    An error frame is not a response: check :func:`is_error_frame` first (it
    fails here as a truncated body).
    """
    response_type = RESPONSE_TYPES.get(api_key)
    if response_type is None:
        raise ProtocolError(f"unknown api_key {api_key}", code=ErrorCode.UNSUPPORTED_VERSION)
    return decode_response_as(response_type, frame)


def decode_response_as(response_type: type, frame: Buffer) -> tuple[int, Response]:
    """``(correlation_id, body)`` of a response frame (without size prefix) of ``response_type``."""
    reader = Reader(frame)
    correlation_id = reader.int32()
    response = response_type.__wire__.read(reader)
    reader.expect_end()
    return correlation_id, response


def encode_fetch_response_parts(
    correlation_id: int,
    partitions: Sequence[
        FetchPartitionHeader | tuple[str, int, ErrorCode | int, int, int]
    ],
) -> list[bytes]:
    """Header chunks ``h0 .. hk`` of a FETCH answer whose message sets are sent apart.

    For k partitions the frame on the wire is ``h0 + data0 + h1 + data1 + ...
    + h(k-1) + data(k-1) + hk``, where ``data_i`` is the ``data_length`` bytes
    of partition i's message set. ``h0`` starts with the size prefix, which
    counts those data bytes; ``hk`` is ``b""`` (nothing follows the last
    message set) and is there so that headers and data always alternate.
    """
    return fetch_header_parts(correlation_id, partitions, _FETCH_ONE_TAIL)


# size, correlation_id, the partitions' count (1), the topic's length
_FETCH_ONE_HEAD = struct.Struct(">iiih")
# partition, error_code, log_end_offset, the message set's length
_FETCH_ONE_TAIL = struct.Struct(">ihqi")


def fetch_header_parts(correlation_id: int, partitions, tail: struct.Struct) -> list[bytes]:
    """Header chunks of a fetch answer of any version whose message sets are sent
    apart (see :func:`encode_fetch_response_parts`). Each partition is ``(topic,
    partition, ..., data_length)``; ``tail`` packs all of it but the topic, so it
    ends with the set's length. ValueError for a value that does not fit its wire type."""
    if len(partitions) == 1 and partitions[0][0] is not None:
        return _fetch_parts_of_one(correlation_id, partitions[0], tail)
    return _header_parts(correlation_id, partitions, tail)


def _fetch_parts_of_one(correlation_id: int, header, tail: struct.Struct) -> list[bytes]:
    """What :func:`_header_parts` gives for one partition, in two packs: a
    writer answering a long poll, and most fetches, have one."""
    topic, *fields = header
    data_length = fields[-1]
    if data_length < 0:
        raise ValueError(f"negative data length {data_length}")
    name = topic.encode("utf-8")
    total = _FETCH_ONE_HEAD.size + tail.size + len(name) + data_length
    if total - SIZE_PREFIX_BYTES > MAX_FRAME_SIZE:
        raise ValueError(f"a frame of {total} bytes does not fit its int32 size")
    try:
        return [_FETCH_ONE_HEAD.pack(total - SIZE_PREFIX_BYTES, correlation_id, 1, len(name))
                + name + tail.pack(*fields),
                b""]
    except struct.error as exc:
        raise ValueError(f"value does not fit its wire type: {exc}") from None


def _fetch_parts(correlation_id: int, partitions) -> list[bytes]:
    """:func:`encode_fetch_response_parts` for any number of partitions."""
    return _header_parts(correlation_id, partitions, _FETCH_ONE_TAIL)


def _header_parts(correlation_id: int, partitions, tail: struct.Struct) -> list[bytes]:
    """:func:`fetch_header_parts` for any number of partitions."""
    chunks: list[bytes] = []
    total = 0
    writer = Writer()
    writer.int32(0)  # the size, patched below
    try:
        writer.int32(correlation_id)
        writer.int32(len(partitions))
        for topic, *fields in partitions:
            data_length = fields[-1]
            if data_length < 0:
                raise ValueError(f"negative data length {data_length}")
            writer.string(topic)
            chunk = writer.getvalue() + tail.pack(*fields)
            chunks.append(chunk)
            total += len(chunk) + data_length
            writer = Writer()
    except struct.error as exc:
        raise ValueError(f"value does not fit its wire type: {exc}") from None
    last = writer.getvalue()
    chunks.append(last)
    total += len(last)
    return _with_size(chunks, total)


_FETCH_PART_TAIL = struct.Struct(">hqi")  # error_code, log_end_offset, set size: ends a header chunk


def fetch_part_emptied(head: Buffer, data_length: int, code: ErrorCode | int) -> bytes:
    """``head`` (a chunk of :func:`encode_fetch_response_parts` that a message
    set of ``data_length`` bytes follows) with that partition's error code set
    to ``code`` and its set empty; the frame's size must then shrink by
    ``data_length`` (:func:`frame_shrunk`)."""
    return emptied_part(head, data_length, _FETCH_PART_TAIL, "FETCH",
                        lambda fields: (code, fields[1], 0))


def emptied_part(head: Buffer, data_length: int, tail: struct.Struct, what: str,
                 refill: Callable[[tuple], tuple]) -> bytes:
    """``head`` with its partition ``tail`` (ending with the set's length, which
    must be ``data_length``) packed again from ``refill`` of its fields: the
    routine under :func:`fetch_part_emptied` and its FETCH v1 twin."""
    out = bytearray(head)
    at = len(out) - tail.size
    if at < 0:
        raise ValueError(f"not a {what} answer header chunk")
    fields = tail.unpack_from(out, at)
    if fields[-1] != data_length:
        raise ValueError(f"header chunk announces {fields[-1]} bytes, not {data_length}")
    tail.pack_into(out, at, *refill(fields))
    return bytes(out)


def frame_shrunk(first: Buffer, by: int) -> bytes:
    """The first chunk of an answer, its size prefix lowered by ``by`` bytes."""
    out = bytearray(first)
    (size,) = _SIZE.unpack_from(out, 0)
    if not 0 <= by <= size:
        raise ValueError(f"cannot take {by} bytes off a frame of {size}")
    _SIZE.pack_into(out, 0, size - by)
    return bytes(out)
