"""Hand packing of docs/spec/protocol.md's wire types, for writing expected frames in tests."""

import struct


def i16(value: int) -> bytes:
    return struct.pack(">h", value)


def i32(value: int) -> bytes:
    return struct.pack(">i", value)


def i64(value: int) -> bytes:
    return struct.pack(">q", value)


def string(value: str | None) -> bytes:
    if value is None:
        return i16(-1)
    data = value.encode()
    return i16(len(data)) + data


def data(value: bytes) -> bytes:
    return i32(len(value)) + value


def array(*items: bytes) -> bytes:
    return i32(len(items)) + b"".join(items)


def request_frame(api_key: int, correlation_id: int, client_id: str | None, body: bytes,
                  api_version: int = 0) -> bytes:
    """A request frame *without* its size prefix."""
    return i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id) + body


def sized(frame: bytes) -> bytes:
    return i32(len(frame)) + frame
