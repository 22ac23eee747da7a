"""Codecs of the versions that say how long a quota held their answer
(docs/spec/protocol.md, "Quotas"): PRODUCE v1 and FETCH v2.

Their requests are those of version 0, field for field; their answers are
those of version 0 with ``throttle_time_ms:int32`` appended: how long the
broker held the answer (and did not read the connection) because the
principal went faster than its quota, 0 when it did not. FETCH v1 is
replication's (:mod:`~hostbroker.protocol.replication`), so the consumer's
throttled FETCH is version 2. Clients that send version 0 are held the same
way, silently.

Declared as the other versions are (their own table keyed by ``(api_key,
api_version)``, :data:`THROTTLED_REQUEST_TYPES`; version 0 stays exactly as
it was); :func:`hostbroker.protocol.replication.decode_any_request` decodes
them. The broker encodes these answers with a throttle time of 0 and the
processor that holds one writes the time into its last four bytes
(:func:`set_throttle_time`), as only it knows the principal's rate.
:func:`fetch_v2_parts` is the sendfile form of a FETCH v2 answer,
:func:`produce_v1_frame` a PRODUCE v1 answer made of version 0's (how the
processor and the writer answer these versions on the routes that pass the
handler, with a throttle time of 0: they take them only from connections
without a quota).

Pure, like the rest of the package.
"""

from __future__ import annotations

import struct
from typing import ClassVar

from hostbroker.protocol import api
from hostbroker.protocol.bodies import (
    ApiKey,
    FetchPartition,
    FetchPartitionResult,
    ProducePartition,
    ProducePartitionResult,
)
from hostbroker.protocol.primitives import Buffer
from hostbroker.protocol.schema import Array, Int16, Int32, wire_record

__all__ = [
    "FETCH_V2",
    "PRODUCE_V1",
    "THROTTLED_REQUEST_TYPES",
    "THROTTLED_RESPONSE_TYPES",
    "FetchRequestV2",
    "FetchResponseV2",
    "ProduceRequestV1",
    "ProduceResponseV1",
    "decode_response",
    "fetch_v2_parts",
    "produce_v1_frame",
    "read_throttle_time",
    "set_throttle_time",
    "throttled_answer",
]

PRODUCE_V1 = 1
FETCH_V2 = 2
MAX_THROTTLE_MS = 2**31 - 1
_INT32 = struct.Struct(">i")
_SIZE = struct.Struct(">i")


@wire_record
class ProduceRequestV1:
    """The body of version 0; its answer carries the throttle time."""

    API_KEY: ClassVar[int] = ApiKey.PRODUCE
    API_VERSION: ClassVar[int] = PRODUCE_V1
    acks: Int16
    timeout_ms: Int32
    partitions: Array[ProducePartition]

    def check(self) -> None:
        return None


@wire_record
class ProduceResponseV1:
    partitions: Array[ProducePartitionResult]
    throttle_time_ms: Int32 = 0

    def check(self) -> None:
        if self.throttle_time_ms < 0:
            raise api.ProtocolError(f"negative throttle time {self.throttle_time_ms}")


@wire_record
class FetchRequestV2:
    """The body of version 0 (a consumer's); its answer carries the throttle time."""

    API_KEY: ClassVar[int] = ApiKey.FETCH
    API_VERSION: ClassVar[int] = FETCH_V2
    max_wait_ms: Int32
    min_bytes: Int32
    partitions: Array[FetchPartition]

    def check(self) -> None:
        return None


@wire_record
class FetchResponseV2:
    partitions: Array[FetchPartitionResult]
    throttle_time_ms: Int32 = 0

    def check(self) -> None:
        if self.throttle_time_ms < 0:
            raise api.ProtocolError(f"negative throttle time {self.throttle_time_ms}")


THROTTLED_REQUEST_TYPES: dict[tuple[int, int], type] = {
    (ApiKey.PRODUCE, PRODUCE_V1): ProduceRequestV1,
    (ApiKey.FETCH, FETCH_V2): FetchRequestV2,
}
THROTTLED_RESPONSE_TYPES: dict[tuple[int, int], type] = {
    (ApiKey.PRODUCE, PRODUCE_V1): ProduceResponseV1,
    (ApiKey.FETCH, FETCH_V2): FetchResponseV2,
}
# the (api key, version) pairs whose answers end with throttle_time_ms
THROTTLED_ANSWERS = frozenset(THROTTLED_REQUEST_TYPES)


def throttled_answer(api_key: int, api_version: int) -> bool:
    """Whether the answer of this request kind ends with ``throttle_time_ms``."""
    return (api_key, api_version) in THROTTLED_ANSWERS


def fetch_v2_parts(pieces: list) -> list:
    """A FETCH v0 answer's pieces (:func:`~hostbroker.protocol.api.encode_fetch_response_parts`
    with its message sets between them, the first piece holding the size
    prefix) turned into version 2's: four bytes more,
    ``throttle_time_ms`` = 0 at the end (in a piece of bytes: a message set
    sent from its file stays whole). ValueError when the frame would pass
    the largest frame."""
    first = bytearray(pieces[0])
    (size,) = _SIZE.unpack_from(first, 0)
    if size > api.MAX_FRAME_SIZE - _INT32.size:
        raise ValueError(f"a frame of {size} bytes has no room for a throttle time")
    _SIZE.pack_into(first, 0, size + _INT32.size)
    out = list(pieces)
    out[0] = bytes(first)
    if isinstance(out[-1], (bytes, bytearray)):
        out[-1] = bytes(out[-1]) + _INT32.pack(0)
    else:
        out.append(_INT32.pack(0))  # (after a message set sent from its file)
    return out


def produce_v1_frame(frame: bytes) -> bytes:
    """A PRODUCE v0 answer frame (size prefix included) as version 1's:
    ``throttle_time_ms`` = 0 appended. An error frame stays as it is (errors
    are alike in every version)."""
    (size,) = _SIZE.unpack_from(frame, 0)
    if size == api.ERROR_FRAME_SIZE:
        return frame
    return fetch_v2_parts([frame])[0]


def set_throttle_time(pieces: list, throttle_ms: int) -> bool:
    """Write ``throttle_ms`` into the last four bytes of a PRODUCE v1 or
    FETCH v2 answer (its pieces, the last of them bytes); False (nothing
    changed) for an error frame, an empty answer or a last piece too short."""
    if not pieces or not isinstance(pieces[0], (bytes, bytearray)):
        return False
    if len(pieces[0]) >= _SIZE.size and _SIZE.unpack_from(pieces[0], 0)[0] == api.ERROR_FRAME_SIZE:
        return False
    last = pieces[-1]
    if not isinstance(last, (bytes, bytearray)) or len(last) < _INT32.size:
        return False
    if len(pieces) == 1 and len(last) < _SIZE.size + 12:
        return False  # shorter than any answer of these versions
    pieces[-1] = bytes(last[:-_INT32.size]) + _INT32.pack(min(max(0, throttle_ms),
                                                              MAX_THROTTLE_MS))
    return True


def read_throttle_time(frame: Buffer) -> int:
    """The throttle time of a PRODUCE v1 or FETCH v2 answer frame (without its
    size prefix): its last four bytes."""
    if len(frame) < 12:
        raise api.ProtocolError(f"an answer of {len(frame)} bytes has no throttle time")
    return _INT32.unpack_from(frame, len(frame) - _INT32.size)[0]


def decode_response(frame: Buffer, cls: type):
    """``(correlation_id, body)`` of a PRODUCE v1 or FETCH v2 answer frame
    (without its size prefix). Check :func:`~hostbroker.protocol.api.is_error_frame` first."""
    if cls not in THROTTLED_RESPONSE_TYPES.values():
        raise ValueError(f"{cls!r} is not a throttled answer")
    correlation_id, response = api.decode_response_as(cls, frame)
    response.check()
    return correlation_id, response
