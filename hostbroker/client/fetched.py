"""A fetched message set: what one partition's answer to one FETCH holds.

:class:`FetchedSet` reads the set's entries as they are asked for: as
``(offset, next_offset, value)`` tuples (iteration) or as the log format
decodes them (:meth:`FetchedSet.messages`, for a reader that builds its own
tuples); CRCs checked with ``check.crcs``, a compressed wrapper never inflated
past ``fetch.message.max.bytes``, a bad entry raised (or, with
``skip.bad.messages``, logged and skipped) after every message before it,
named by topic, partition and offset. Pure: it is made by the
:class:`~hostbroker.client.consumer.SimpleConsumer` from an answer's bytes,
and read by its callers, the high-level consumer's streams and the Spark
source's Arrow reader.
"""

from __future__ import annotations

import logging
import operator
import struct
from collections.abc import Callable, Iterator
from typing import Any

from hostbroker.client.errors import DecompressedTooLargeError, InvalidEntryError
from hostbroker.errors import InvalidMessageError, MessageTooLargeError
from hostbroker.log.message import (DEFAULT_MAX_MESSAGE_BYTES, LENGTH_SIZE, Message,
                                    count_entries, iter_messages)

log = logging.getLogger(__name__)

# The largest entry a broker takes by default, with its length field.
DEFAULT_FETCH_MESSAGE_MAX_BYTES = DEFAULT_MAX_MESSAGE_BYTES + LENGTH_SIZE

# One C call turns a Message (offset, next_offset, payload, codec, magic)
# into the (offset, next_offset, value) a consumer hands out.
_OFFSETS_AND_VALUE = operator.itemgetter(0, 1, 2)


class FetchedSet:
    """The messages one partition returned for one fetch.

    Iterating yields ``(offset, next_offset, value)`` tuples, decoded (and
    CRC-checked, with ``check.crcs``) as they are read; a bad entry raises
    InvalidMessageError after every message before it. ``len()`` counts the
    messages (opening compressed wrappers, once); ``bool()`` is whether there
    is any, without decoding.

    ``offset`` is where the set starts (the offset asked for, or where
    ``auto.offset.reset`` moved it from ``reset_from``); ``next_offset`` is
    where the next fetch starts, after the last whole entry;
    ``log_end_offset`` is the partition's log end when the broker answered;
    ``entries`` counts whole top-level entries (a compressed wrapper is one).

    An entry that cannot be read raises :class:`InvalidEntryError` (naming
    topic, partition and offset) after every message before it; with
    ``skip_bad`` it is logged as a warning and skipped. A compressed wrapper
    is never inflated past ``max_message_bytes``
    (:class:`DecompressedTooLargeError`).
    """

    __slots__ = (
        "topic", "partition", "offset", "next_offset", "log_end_offset", "entries",
        "reset_from", "message_set", "_check_crcs", "_max_length", "_max_inflated",
        "_skip_bad", "_messages",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        message_set: bytes,
        log_end_offset: int,
        *,
        check_crcs: bool = True,
        max_message_bytes: int = DEFAULT_FETCH_MESSAGE_MAX_BYTES,
        reset_from: int | None = None,
        skip_bad: bool = False,
    ):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_end_offset = log_end_offset
        self.reset_from = reset_from
        # bytes: the answer's buffer may be reused, and iter_messages copies
        # anything else once anyway.
        self.message_set = message_set if type(message_set) is bytes else bytes(message_set)
        self.entries, whole = count_entries(self.message_set)
        self.next_offset = offset + whole
        self._check_crcs = check_crcs
        self._max_length = max_message_bytes - LENGTH_SIZE
        self._max_inflated = max_message_bytes
        self._skip_bad = skip_bad
        self._messages: list[tuple[int, int, bytes]] | None = None

    def __iter__(self) -> Iterator[tuple[int, int, bytes]]:
        if self._messages is not None:
            return iter(self._messages)
        return self._read(self._decode)

    def messages(self) -> Iterator[Message]:
        """The set's messages as the log format decodes them, ``(offset, next_offset,
        payload, codec, magic)``, with the checks and errors of iteration: for a reader
        that builds tuples of its own from them (the high-level consumer)."""
        return self._read(self._decode_whole)

    def _decode_whole(self, data: bytes, offset: int) -> Iterator[Message]:
        return iter_messages(
            data, offset, check_crc=self._check_crcs, max_message_bytes=self._max_length,
            max_inflated_bytes=self._max_inflated)

    def _decode(self, data: bytes, offset: int) -> Iterator[tuple[int, int, bytes]]:
        return map(_OFFSETS_AND_VALUE, self._decode_whole(data, offset))

    def _read(self, decode: Callable[[bytes, int], Iterator[Any]]) -> Iterator[Any]:
        pos = 0
        while True:
            data = self.message_set if pos == 0 else self.message_set[pos:]
            try:
                yield from decode(data, self.offset + pos)
                return
            except (InvalidMessageError, MessageTooLargeError) as exc:
                bad = self._bad_entry(pos, exc)
            if not self._skip_bad or bad.next_offset < 0:
                raise bad
            log.warning("%s; skipped (skip.bad.messages)", bad)
            pos = bad.next_offset - self.offset

    def _bad_entry(self, pos: int, error: Exception) -> InvalidEntryError:
        """The error for the first entry from ``pos`` on that does not decode alone (every
        entry before it decoded whole: iter_messages raises only after them)."""
        data = self.message_set
        whole = self.next_offset - self.offset
        while pos < whole:
            (length,) = _LENGTH.unpack_from(data, pos)
            end = pos + LENGTH_SIZE + length
            try:
                for _ in self._decode(data[pos:end], self.offset + pos):
                    pass
            except (InvalidMessageError, MessageTooLargeError) as exc:
                # An entry over the length limit is not inflated: only a wrapper that
                # fits can inflate past it.
                inflated = isinstance(exc, MessageTooLargeError) and length <= self._max_length
                kind = DecompressedTooLargeError if inflated else InvalidEntryError
                return kind(self.topic, self.partition, self.offset + pos, self.offset + end,
                            _reason(exc))
            pos = end
        return InvalidEntryError(self.topic, self.partition, self.offset + pos, -1, _reason(error))

    def __len__(self) -> int:
        if self._messages is None:
            self._messages = list(iter(self))
        return len(self._messages)

    def __bool__(self) -> bool:
        return self.entries > 0

    @property
    def at_end(self) -> bool:
        """Whether ``next_offset`` is the log end the broker reported."""
        return self.next_offset >= self.log_end_offset

    def __repr__(self) -> str:
        return (f"<FetchedSet {self.topic}/{self.partition} [{self.offset}, {self.next_offset})"
                f" {self.entries} entries, log end {self.log_end_offset}>")


_LENGTH = struct.Struct(">i")


def _reason(error: Exception) -> str:
    """What a log-format error says, without its "entry at byte N: " (the caller names it)."""
    text = str(error)
    return text.split(": ", 1)[1] if text.startswith("entry at byte ") else text
