"""Cutting a byte stream into size-prefixed frames (docs/spec/protocol.md, "Framing").

:class:`FrameReader` is fed whatever the socket gave and hands out whole
frames, without their size prefix, as soon as they are complete. It never
reads a socket itself.
"""

from __future__ import annotations

import struct

from hostbroker.errors import ProtocolError
from hostbroker.protocol.errors import FrameTooLargeError
from hostbroker.protocol.primitives import Buffer

# socket.request.max.bytes default (docs/spec/protocol.md).
DEFAULT_MAX_FRAME_BYTES = 104_857_600

_SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")
_CORRELATION_ID_AT = _SIZE.size + 4  # after size, api_key and api_version


class FrameReader:
    """Accumulates stream bytes and splits them into frames.

    Consumed bytes are not removed on every frame, which would copy the
    unread tail each time and turn a stream of many small frames, or one large
    frame fed in small pieces, quadratic. A read position moves instead, and
    the buffer is compacted only once the consumed part is at least half of it.

    After a :class:`ProtocolError` the stream is unusable: every later call
    raises again, since nothing after a bad size can be trusted.
    """

    # Compacting a smaller buffer is not worth a copy.
    _COMPACT_AT = 64 * 1024

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._position = 0

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet handed out as frames."""
        return len(self._buffer) - self._position

    def feed(self, data: Buffer) -> None:
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next whole frame without its size prefix, or None until more is fed.

        Raises FrameTooLargeError (REQUEST_TOO_LARGE) as soon as a declared size
        is over ``max_frame_bytes``, before its bytes arrive; ProtocolError for
        a negative size.
        """
        buffer, start = self._buffer, self._position
        available = len(buffer) - start
        if available < _SIZE.size:
            return None
        (size,) = _SIZE.unpack_from(buffer, start)
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            correlation_id = None
            if available >= _CORRELATION_ID_AT + _CORRELATION_ID.size:
                (correlation_id,) = _CORRELATION_ID.unpack_from(buffer, start + _CORRELATION_ID_AT)
            raise FrameTooLargeError(size, self.max_frame_bytes, correlation_id)
        end = start + _SIZE.size + size
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view:
            frame = view[start + _SIZE.size : end].tobytes()
        self._position = end
        self._compact()
        return frame

    def _compact(self) -> None:
        if self._position == len(self._buffer):
            self._buffer.clear()
            self._position = 0
        elif self._position >= self._COMPACT_AT and 2 * self._position >= len(self._buffer):
            del self._buffer[: self._position]
            self._position = 0
