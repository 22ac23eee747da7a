"""Cutting a partition's log: truncation at an entry boundary, and a
follower's restart at its leader's log start.

Mixed into :class:`~hostbroker.log.partition.PartitionLog` (which owns the
segments, append, roll, flush and retention) and working on its state: the
segment bases, the active segment's descriptor and reservation, the log end
and the flushed offset. :meth:`LogCuts.entry_floor` finds where a follower
may cut (a leader's answer may name any byte), :meth:`LogCuts.truncate_to`
drops the bytes from there durably, and :meth:`LogCuts.restart_at` empties
the log and starts it past its end (docs/storage.md, "Replicas"). Like the
rest of a ``PartitionLog``, only the writer of its log dir calls them.
"""

from __future__ import annotations

import os
import struct

from hostbroker.errors import OffsetOutOfRangeError
from hostbroker.log.files import fsync_dir, open_file, remove_any, storage_errors
from hostbroker.log.prealloc import Reservation
from hostbroker.log.segments import locate

APPEND_FLAGS = os.O_WRONLY | os.O_APPEND  # open_file adds O_NOFOLLOW and O_CLOEXEC
_LENGTH = struct.Struct(">i")  # an entry's length prefix (docs/spec/log-format.md)
_FLOOR_CHUNK = 1 << 20  # bytes read at a time by entry_floor
_MAX_OFFSET = 2**63 - 1


class LogCuts:
    """Mixin of :class:`~hostbroker.log.partition.PartitionLog`: the cuts of its log."""

    def entry_floor(self, offset: int) -> int:
        """The largest entry boundary at or below ``offset``: where the last
        whole entry that ends at or before it ends (``offset`` itself when it
        is one; the log end for ``offset`` at or past it).

        A follower cuts its log only there (a leader's answer may name any
        byte). Walks the entries' length prefixes from the start of the
        segment holding ``offset``, reading ``_FLOOR_CHUNK`` bytes at a time.
        Raises OffsetOutOfRangeError below the log start, StorageError when
        the segment cannot be read."""
        if offset >= self._log_end:
            return self._log_end
        if offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"{offset} is below the log start {self.log_start_offset} of {self._path}")
        base = self._bases[locate(self._bases, offset)]
        target, pos = offset - base, 0
        with storage_errors(f"cannot read {self.segment_path(base)}"):
            fd = open_file(self.segment_path(base), os.O_RDONLY)
            try:
                chunk, chunk_at = b"", 0
                while pos + _LENGTH.size <= target:
                    if pos + _LENGTH.size > chunk_at + len(chunk):
                        chunk, chunk_at = os.pread(fd, _FLOOR_CHUNK, pos), pos
                        if len(chunk) < _LENGTH.size:
                            break
                    (length,) = _LENGTH.unpack_from(chunk, pos - chunk_at)
                    if length < 0 or pos + _LENGTH.size + length > target:
                        break
                    pos += _LENGTH.size + length
            finally:
                os.close(fd)
        return base + pos

    def truncate_to(self, offset: int) -> None:
        """Drop every byte at and after ``offset``, durably.

        For a writer restarting after a crash, to cut bytes it never
        acknowledged. Raises OffsetOutOfRangeError outside [log start, log end].
        """
        if not self.log_start_offset <= offset <= self._log_end:
            raise OffsetOutOfRangeError(
                f"cannot truncate {self._path} to {offset}: outside "
                f"[{self.log_start_offset}, {self._log_end}]")
        if offset == self._log_end:
            return
        index = locate(self._bases, offset)
        self._drop_copy_fd()
        with storage_errors(f"cannot truncate {self._path}"):
            os.close(self._active_fd())
            self._fd = None
            for base in self._bases[index + 1:]:
                os.unlink(self.segment_path(base))
            self._bases = self._bases[:index + 1]
            self._fd = open_file(self.segment_path(self._bases[-1]), APPEND_FLAGS)
            os.ftruncate(self._fd, offset - self._bases[-1])  # drops any reservation too
            self._reservation.reserved_to = offset - self._bases[-1]
            os.fsync(self._fd)
            fsync_dir(self._path)
        self._log_end = offset
        self._mark_flushed(offset)

    def restart_at(self, offset: int) -> None:
        """Empty the log and start it again at ``offset``, past its end: a
        follower whose leader's log starts there (docs/storage.md, "Replicas").

        Crash-safe: the new empty segment is created (the dir synced) before
        the old segments are removed, oldest first, so a crash leaves the new
        log or the old one (perhaps without its oldest segments, as retention
        would): recovery finds the old segments' sizes short of the new base
        and cuts the new segment away. Raises OffsetOutOfRangeError for an
        offset not past the log end, StorageError when the disk fails."""
        if not self._log_end < offset <= _MAX_OFFSET:
            raise OffsetOutOfRangeError(
                f"cannot restart {self._path} at {offset}: not past its end {self._log_end}")
        old_fd = self._active_fd()
        self._drop_copy_fd()
        with storage_errors(f"cannot restart {self._path} at {offset}"):
            new_path = self.segment_path(offset)
            if os.path.lexists(new_path):  # not a segment of ours: all are below the end
                remove_any(new_path)
            new_fd = open_file(new_path, APPEND_FLAGS | os.O_CREAT | os.O_EXCL)
            fsync_dir(self._path)
            self._fd = new_fd
            os.close(old_fd)
            old, self._bases = self._bases, [offset]
            for base in old:
                os.unlink(self.segment_path(base))
            fsync_dir(self._path)
        self._reservation = Reservation(self._config.preallocate_bytes,
                                        self._config.segment_bytes, 0)
        self._log_end = offset
        self._mark_flushed(offset)
