"""Consumer group offsets committed to the broker (OFFSET_COMMIT / OFFSET_FETCH).

Owned by the writer process of the first log dir; not thread safe. The store
is one append-only file, ``__consumer_offsets.log``, of records::

    length:int32  crc:uint32  payload (JSON: [[group, topic, partition, offset, metadata], ...])

big-endian, CRC-32 of the payload, one record per commit request. Each commit
is fdatasynced before it is acknowledged, so an answered commit survives a
crash of the host: :meth:`OffsetStore.commit` does all of it, and
:meth:`~OffsetStore.write`, a sync of :meth:`~OffsetStore.dup_fd` and
:meth:`~OffsetStore.apply` are the same in steps, for a caller that syncs in
another thread. Loading replays the records (the last value of a key wins)
and truncates at the first invalid record, as log recovery does.

What is written can always be replayed: replay takes any record whose length
the int32 field can hold and that lies inside the file, and :meth:`commit`
refuses (:class:`OffsetRecordTooLargeError`, nothing written) a record over
``record_max_bytes``, which is below that. Lowering the setting never makes
records already written unreadable.

Compaction keeps the file bounded by the live offsets: when it is over
``compact_min_bytes`` and ``compact_ratio`` times the size of the live
entries, the live key -> value map is written to ``<file>.compact`` (in
records of at most ``record_max_bytes``), fsynced, renamed over the store and
the directory fsynced. A crash before the rename leaves the old file whole
and a stray ``.compact`` file, which :meth:`OffsetStore.open` removes.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.files import clear_for_file, create_exclusive, fsync_dir, open_file, remove_any

log = logging.getLogger(__name__)

FILENAME = "__consumer_offsets.log"
COMPACT_SUFFIX = ".compact"
_HEAD = struct.Struct(">iI")
# What replay accepts: any length the int32 field can hold (the file bounds it).
REPLAY_MAX_BYTES = 2**31 - 1
DEFAULT_RECORD_MAX_BYTES = 64 * 1024 * 1024

Key = tuple[str, str, int]


class Written(NamedTuple):
    """A commit :meth:`OffsetStore.write` wrote: its entries, parsed and encoded."""

    parsed: list[tuple[Key, int, str | None]]
    encoded: list[bytes]


class OffsetRecordTooLargeError(HostbrokerError):
    """A commit whose record would be over ``offsets.record.max.bytes``: not written."""

    code = ErrorCode.INVALID_REQUEST


def _encode_entry(key: Key, offset: int, metadata: str | None) -> bytes:
    return json.dumps([*key, offset, metadata], separators=(",", ":")).encode()


def _record(entries: list[bytes]) -> bytes:
    payload = b"[" + b",".join(entries) + b"]"
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


_INT32 = range(-2**31, 2**31)
_INT64 = range(-2**63, 2**63)
_READ_BYTES = 1 << 20


def _replayed(payload: bytes) -> list[tuple[Key, int, str | None]] | None:
    """The entries of one record's payload; None when it is not one :meth:`write` wrote."""
    try:
        entries = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(entries, list):
        return None
    replayed = []
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 5:
            return None
        group, topic, partition, offset, metadata = entry
        if not (isinstance(group, str) and isinstance(topic, str)
                and type(partition) is int and partition in _INT32
                and type(offset) is int and offset in _INT64
                and (metadata is None or isinstance(metadata, str))):
            return None
        replayed.append(((group, topic, partition), offset, metadata))
    return replayed


def _replay(fd: int, offsets: dict[Key, tuple[int, str | None, int]]) -> int:
    """Replay the records of the store open at ``fd`` into ``offsets``; return where
    the valid records end. Reads record by record, never the whole file at once."""
    reader = os.fdopen(os.dup(fd), "rb", buffering=_READ_BYTES)
    with reader:
        valid_end = 0
        while True:
            head = reader.read(_HEAD.size)
            if len(head) < _HEAD.size:
                return valid_end
            length, crc = _HEAD.unpack(head)
            if length < 0 or length > REPLAY_MAX_BYTES:
                return valid_end
            payload = reader.read(length)
            if len(payload) < length or zlib.crc32(payload) != crc:
                return valid_end
            replayed = _replayed(payload)
            if replayed is None:
                return valid_end
            for key, offset, metadata in replayed:
                offsets[key] = (offset, metadata, len(_encode_entry(key, offset, metadata)))
            valid_end += _HEAD.size + length


class OffsetStore:
    def __init__(self, path: str, fd: int, offsets: dict[Key, tuple[int, str | None, int]],
                 size: int, record_max_bytes: int, compact_min_bytes: int, compact_ratio: int):
        self.path = path
        self._fd = fd
        self._offsets = offsets  # key -> (offset, metadata, bytes of its encoded entry)
        self._live_bytes = sum(n + 1 for _, _, n in offsets.values())
        # group -> the topics it has a committed offset on (LIST_OFFSET_GROUPS);
        # offsets are never removed, so a topic once here stays
        self._topics: dict[str, set[str]] = {}
        for group, topic, _ in offsets:
            self._topics.setdefault(group, set()).add(topic)
        self._names = sorted(self._topics)  # the groups, kept sorted (a page is a bisect)
        self._new_names: list[str] = []  # groups since, not yet in _names
        self.size = size
        self.record_max_bytes = min(record_max_bytes, REPLAY_MAX_BYTES)
        self.compact_min_bytes = compact_min_bytes
        self.compact_ratio = compact_ratio
        self.compactions = 0
        self._retry_size = 0

    @classmethod
    def open(cls, log_dir: str, record_max_bytes: int = DEFAULT_RECORD_MAX_BYTES,
             compact_min_bytes: int = 16 * 1024 * 1024, compact_ratio: int = 4) -> "OffsetStore":
        """Replay the store of ``log_dir`` (creating it if missing) and open it for appends.

        Whatever the file holds, this loses at most the file's own records:
        replay stops at the first record that is not one :meth:`write` could
        have written (cut off, bad CRC, not JSON, wrong shapes, nested too
        deeply) and the rest is cut off, with one log line; anything but a
        regular file in its place (a link, never followed; a directory) is
        removed, with one log line, and the store starts empty. Raises
        OSError only when the log dir cannot be written.
        """
        path = os.path.join(log_dir, FILENAME)
        remove_any(path + COMPACT_SUFFIX)  # a compaction that never reached its rename
        clear_for_file(path, "the consumer offsets store")
        offsets: dict[Key, tuple[int, str | None, int]] = {}
        fd = open_file(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            valid_end = _replay(fd, offsets)
            size = os.fstat(fd).st_size
            if valid_end < size:
                log.warning("%s: the records after byte %d are not valid; %d bytes cut off",
                            path, valid_end, size - valid_end)
                os.ftruncate(fd, valid_end)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, offsets, valid_end, record_max_bytes, compact_min_bytes,
                   compact_ratio)

    def commit(self, entries: Iterable[tuple[str, str, int, int, str | None]]) -> None:
        """Durably record offsets; returns once they are on disk.

        Raises OffsetRecordTooLargeError (nothing written) when the record
        would be over ``record_max_bytes``, OSError when the disk fails.
        :meth:`write`, a sync of :meth:`dup_fd` and :meth:`apply` are the same
        in three steps, for a caller that syncs elsewhere."""
        written = self.write(entries)
        if written is None:
            return
        os.fdatasync(self._fd)
        self.apply(written)
        self.maybe_compact()

    def write(self, entries: Iterable[tuple[str, str, int, int, str | None]]) -> Written | None:
        """Append the record of a commit, not yet synced nor read by :meth:`fetch`
        (None for no entries). Once a sync of the file that began after this
        returned, :meth:`apply` makes it what :meth:`fetch` reads. Raises as
        :meth:`commit`."""
        parsed = [((str(g), str(t), int(p)), int(o), m) for g, t, p, o, m in entries]
        if not parsed:
            return None
        encoded = [_encode_entry(*e) for e in parsed]
        record = _record(encoded)
        if len(record) - _HEAD.size > self.record_max_bytes:
            raise OffsetRecordTooLargeError(
                f"offset commit of {len(record) - _HEAD.size} bytes is over "
                f"offsets.record.max.bytes ({self.record_max_bytes})")
        view = memoryview(record)
        written = 0
        while written < len(record):
            written += os.write(self._fd, view[written:])
        self.size += len(record)
        return Written(parsed, encoded)

    def dup_fd(self) -> int:
        """A descriptor of the file as it is now, for a sync elsewhere (the caller closes it)."""
        return os.dup(self._fd)

    def apply(self, written: Written) -> None:
        """What :meth:`fetch` reads now holds a commit :meth:`write` wrote (and a sync saved)."""
        for (key, offset, metadata), raw in zip(written.parsed, written.encoded):
            old = self._offsets.get(key)
            if old is not None:
                self._live_bytes -= old[2] + 1
            else:
                topics = self._topics.get(key[0])
                if topics is None:
                    topics = self._topics[key[0]] = set()
                    self._new_names.append(key[0])
                topics.add(key[1])
            self._offsets[key] = (offset, metadata, len(raw))
            self._live_bytes += len(raw) + 1

    def maybe_compact(self) -> None:
        """Compact when the file has grown past its bound (module doc). Only while
        nothing written is waiting for :meth:`apply`: the rewrite is of what
        :meth:`fetch` reads."""
        if self.size > max(self.compact_min_bytes, self.compact_ratio * self.live_bytes,
                           self._retry_size):
            try:
                self.compact()
            except OSError:
                # the commits are stored and the old file whole: try again when it has doubled
                self._retry_size = 2 * self.size

    @property
    def live_bytes(self) -> int:
        """About the size of a file holding only the live offsets."""
        return self._live_bytes + _HEAD.size + 2

    def fetch(self, group: str, topic: str, partition: int) -> tuple[int, str | None]:
        """(offset, metadata); (-1, "") when never committed."""
        value = self._offsets.get((group, topic, partition))
        return (-1, "") if value is None else (value[0], value[1])

    def _sorted_names(self) -> list[str]:
        """The groups, sorted: the new ones put in their places when asked (a
        few each by a bisect, many by one merge of the two sorted runs)."""
        new = self._new_names
        if new:
            if len(new) * 64 < len(self._names):
                for name in new:
                    bisect.insort(self._names, name)
            else:
                new.sort()
                self._names += new
                self._names.sort()  # (two sorted runs: merged, not sorted again)
            self._new_names = []
        return self._names

    def groups(self) -> list[str]:
        """Every group with a committed offset, sorted (LIST_OFFSET_GROUPS)."""
        return list(self._sorted_names())

    def groups_after(self, after: str | None) -> Iterator[str]:
        """The groups sorted after ``after`` (None: every group), in order, from
        the names kept sorted: a bisect, no sort, no copy (not to be held
        across a commit applied)."""
        names = self._sorted_names()
        start = 0 if after is None else bisect.bisect_right(names, after)
        return itertools.islice(names, start, None)

    def topics(self, group: str) -> list[str]:
        """The topics ``group`` has a committed offset on, sorted (none: no such group)."""
        return sorted(self._topics.get(group, ()))

    def compact(self) -> None:
        """Rewrite the file with only the live offsets (see the module doc)."""
        tmp = self.path + COMPACT_SUFFIX
        try:
            with os.fdopen(create_exclusive(tmp), "wb") as f:
                batch: list[bytes] = []
                batch_bytes = 2
                for key, (offset, metadata, _) in self._offsets.items():
                    raw = _encode_entry(key, offset, metadata)
                    if batch and batch_bytes + len(raw) + 1 > self.record_max_bytes:
                        f.write(_record(batch))
                        batch, batch_bytes = [], 2
                    batch.append(raw)
                    batch_bytes += len(raw) + 1
                if batch:
                    f.write(_record(batch))
                f.flush()
                os.fsync(f.fileno())
                size = f.tell()
            os.rename(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        fsync_dir(os.path.dirname(self.path))
        os.close(self._fd)
        self._fd = open_file(self.path, os.O_WRONLY | os.O_APPEND)
        self.size = size
        self.compactions += 1

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
