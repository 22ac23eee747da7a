"""The wire types of docs/spec/protocol.md ("Types"), read from and written to memory.

:class:`Reader` walks a buffer and hands out ints, strings, byte strings and
arrays; :class:`Writer` builds a frame. Both are pure: no sockets, no files.
Every way the input can be short or wrong raises :class:`ProtocolError` (code
``INVALID_REQUEST``), so a caller that decodes untrusted bytes has exactly one
exception to handle.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import TypeVar

from hostbroker.errors import ProtocolError

T = TypeVar("T")

Buffer = bytes | bytearray | memoryview

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

NULL_LENGTH = -1


def _int_reader(codec: struct.Struct, name: str) -> Callable[[Reader], int]:
    """A Reader method for one int type, with the bounds check inline.

    The int readers are most of the calls when decoding, so they skip the
    extra call through ``Reader._need``.
    """
    size = codec.size
    unpack_from = codec.unpack_from

    def read(self: Reader) -> int:
        position = self._pos
        if position + size > self._end:
            raise self._truncated(size, name)
        self._pos = position + size
        return unpack_from(self._view, position)[0]

    read.__name__ = read.__qualname__ = name
    read.__doc__ = f"A big-endian {name}."
    return read


class Reader:
    """Reads wire types from ``data`` starting at ``offset``.

    ``bytes`` returns zero-copy slices of ``data``: they stay valid as long as
    the caller keeps ``data`` unchanged. ``max_items`` bounds the items of all
    arrays read together (None: only by the bytes there are), so that a
    request naming millions of small entries is refused before it is decoded.
    """

    __slots__ = ("_view", "_pos", "_end", "_items_left", "_max_items")

    def __init__(self, data: Buffer, offset: int = 0, max_items: int | None = None):
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        if not 0 <= offset <= len(view):
            raise ProtocolError(f"offset {offset} outside a buffer of {len(view)} bytes")
        self._view = view
        self._pos = offset
        self._end = len(view)
        self._max_items = max_items
        self._items_left = max_items

    @property
    def position(self) -> int:
        return self._pos

    @property
    def remaining(self) -> int:
        return self._end - self._pos

    def _truncated(self, n: int, what: str) -> ProtocolError:
        return ProtocolError(
            f"truncated {what}: needs {n} bytes at {self._pos}, {self._end - self._pos} left"
        )

    def _need(self, n: int, what: str) -> int:
        """Claim the next ``n`` bytes and return where they start."""
        start = self._pos
        if n > self._end - start:
            raise self._truncated(n, what)
        self._pos = start + n
        return start

    int8 = _int_reader(_INT8, "int8")
    int16 = _int_reader(_INT16, "int16")
    int32 = _int_reader(_INT32, "int32")
    int64 = _int_reader(_INT64, "int64")

    def fixed(self, codec: struct.Struct, what: str) -> tuple:
        """The next ``codec.size`` bytes unpacked by ``codec``: several
        fixed-size fields in one call (see ``schema.wire_record``)."""
        position = self._pos
        if position + codec.size > self._end:
            raise self._truncated(codec.size, what)
        self._pos = position + codec.size
        return codec.unpack_from(self._view, position)

    def _claim_sized(self, length: int, what: str) -> int | None:
        """Claim a length-prefixed value's bytes; None for the null length -1."""
        if length == NULL_LENGTH:
            return None
        if length < 0:
            raise ProtocolError(f"negative {what} length {length}")
        return self._need(length, what)

    def string(self) -> str | None:
        """An int16-length UTF-8 string; length -1 is ``None``.

        The length's read and the bounds checks are inline (what
        :meth:`int16` and :meth:`_claim_sized` do): every name and log dir of
        an answer comes through here."""
        position = self._pos
        if position + 2 > self._end:
            raise self._truncated(2, "int16")
        (length,) = _INT16.unpack_from(self._view, position)
        start = position + 2
        end = start + length
        if length < 0 or end > self._end:
            # null (-1), or _claim_sized raises saying what is wrong
            self._pos = start
            self._claim_sized(length, "string")
            return None
        self._pos = end
        try:
            return str(self._view[start:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string at {start} is not UTF-8: {exc.reason}") from None

    def bytes(self) -> memoryview | None:
        """An int32-length byte string as a slice of the input; length -1 is ``None``."""
        length = self.int32()
        start = self._claim_sized(length, "bytes")
        if start is None:
            return None
        return self._view[start : start + length]

    def array(self, read_item: Callable[[Reader], T], min_item_size: int) -> tuple[T, ...]:
        """An int32 count then that many items, each read by ``read_item(self)``.

        The count is checked against the bytes left (each item takes at least
        ``min_item_size``) before anything is allocated, so a hostile count
        costs nothing.
        """
        count = self.int32()
        if count < 0:
            raise ProtocolError(f"negative array count {count}")
        if count * max(min_item_size, 1) > self.remaining:
            raise ProtocolError(
                f"array of {count} items cannot fit in the {self.remaining} bytes left"
            )
        if self._items_left is not None:
            if count > self._items_left:
                raise ProtocolError(
                    f"array of {count} items is over the limit of {self._max_items} "
                    "entries per request"
                )
            self._items_left -= count
        return tuple(read_item(self) for _ in range(count))

    def expect_end(self) -> None:
        if self.remaining:
            raise ProtocolError(f"{self.remaining} bytes left over after the body")


class Writer:
    """Builds a frame in memory.

    Small fields go into a bytearray. A large byte string (a message set) is
    kept by reference and copied once, when :meth:`getvalue` joins the chunks,
    so encoding a multi-megabyte produce request copies its data once.
    """

    __slots__ = ("_chunks", "_buf")

    # Byte strings at least this long are kept by reference, not copied in.
    _BY_REFERENCE = 16 * 1024

    def __init__(self) -> None:
        self._chunks: list[Buffer] = []
        self._buf = bytearray()

    def __len__(self) -> int:
        return sum(map(len, self._chunks)) + len(self._buf)

    def int8(self, value: int) -> None:
        self._buf += _INT8.pack(value)

    def int16(self, value: int) -> None:
        self._buf += _INT16.pack(value)

    def int32(self, value: int) -> None:
        self._buf += _INT32.pack(value)

    def int64(self, value: int) -> None:
        self._buf += _INT64.pack(value)

    def string(self, value: str | None) -> None:
        if value is None:
            self.int16(NULL_LENGTH)
            return
        encoded = value.encode("utf-8")
        self.int16(len(encoded))
        self._buf += encoded

    def bytes(self, value: Buffer | None) -> None:
        if value is None:
            self.int32(NULL_LENGTH)
            return
        length = memoryview(value).nbytes
        self.int32(length)
        if length >= self._BY_REFERENCE:
            self._chunks.append(self._buf)
            self._chunks.append(value)
            self._buf = bytearray()
        else:
            self._buf += value

    def array(self, items: Iterable[T], write_item: Callable[[Writer, T], None]) -> None:
        items = tuple(items)
        self.int32(len(items))
        for item in items:
            write_item(self, item)

    def getvalue(self) -> bytes:
        if not self._chunks:
            return bytes(self._buf)
        return b"".join([*self._chunks, self._buf])

    def patch_int32(self, position: int, value: int) -> None:
        """Overwrite the int32 at ``position`` (a size written before it is known).

        Only positions inside the first chunk can be patched; a size prefix is
        always there.
        """
        first = self._chunks[0] if self._chunks else self._buf
        _INT32.pack_into(first, position, value)
