"""A dir-placed follower's copy of its leader's bytes, mixed into
:class:`~hostbroker.log.partition.PartitionLog` (docs/storage.md, "Replicas
across log dirs").

Owns :meth:`LogCopy.append_copy`: entries of another log's segment file
appended file to file in the kernel (``os.sendfile``), at the same offsets,
with a new segment where the leader's starts, and the second, non-append fd
of the active segment it writes through (``copy_file_range`` fails across
file systems and on an O_APPEND fd; ``sendfile`` into a non-append fd does
not). A failure is told apart: :class:`CopySourceError` when the source
(the leader's dir) is at fault, StorageError when our own file is.
"""

from __future__ import annotations

import os

from hostbroker.errors import StorageError
from hostbroker.log.files import open_file, storage_errors


class CopySourceError(StorageError):
    """:meth:`PartitionLog.append_copy` could not read its source (another
    log dir's file): the copy is undone, and our own log dir is sound."""



class LogCopy:
    """Mixin of :class:`~hostbroker.log.partition.PartitionLog` (its fields:
    ``_fd``, ``_bases``, ``_log_end``, ``_reservation``, ``_copy``)."""

    def append_copy(self, src_fd: int, src_pos: int, length: int,
                    new_segment: bool) -> tuple[int, int]:
        """Append ``length`` bytes of another log's segment file (``src_fd``
        from ``src_pos``): a dir-placed follower copying its leader's entries,
        file to file in the kernel (``os.sendfile``, which works across file
        systems where ``copy_file_range`` does not, into a second, non-append
        fd of the active segment). Return (its base offset, new log end).

        The bytes are whole entries below the leader's published end, checked
        when they were produced, so they are not checked again. ``new_segment``:
        the copy starts a segment of the leader's, so it starts one here too
        (a roll, unless the active segment is still empty); otherwise it goes
        on in the active segment whatever its size, so that the segment files
        match the leader's.

        Raises :class:`CopySourceError` when the source cannot be read (an
        error of the leader's dir, or its file shorter than ``length``: cut
        back under us) and StorageError when our own file fails; either way
        nothing of the copy stays in the log."""
        base = self._log_end
        if length <= 0:
            return base, base
        fd = self._active_fd()
        if new_segment and base > self._bases[-1]:
            self._roll()
            fd = self._fd
        out = self._copy_fd(fd)
        pos = base - self._bases[-1]
        done = 0
        try:
            os.lseek(out, pos, os.SEEK_SET)
            while done < length:
                n = os.sendfile(out, src_fd, src_pos + done, length - done)
                if n == 0:
                    raise CopySourceError(f"the source of a copy into {self._path} ended "
                                          f"{length - done} bytes short")
                done += n
        except OSError as exc:
            own = self._which_failed(src_fd, src_pos + done, out, pos + done)
            self._cut_failed_append(fd, pos)
            if own:
                raise StorageError(f"cannot copy into {self._path}: "
                                   f"{exc.strerror or exc}") from exc
            raise CopySourceError(f"cannot read the source of a copy into {self._path}: "
                                  f"{exc.strerror or exc}") from exc
        except CopySourceError:
            self._cut_failed_append(fd, pos)
            raise
        self._log_end = base + length
        self._reservation.after_append(fd, self._log_end - self._bases[-1])
        self._unflushed_messages += 1
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = self._clock()
        return base, self._log_end

    def _copy_fd(self, active: int) -> int:
        """A write fd of the active segment without O_APPEND (sendfile's target)."""
        base = self._bases[-1]
        if self._copy is not None and self._copy[:2] == (active, base):
            return self._copy[2]
        self._drop_copy_fd()
        with storage_errors(f"cannot open {self.segment_path(base)} to copy into"):
            out = open_file(self.segment_path(base), os.O_WRONLY)
        self._copy = (active, base, out)
        return out

    def _drop_copy_fd(self) -> None:
        if self._copy is not None:
            out, self._copy = self._copy[2], None
            try:
                os.close(out)
            except OSError:
                pass

    @staticmethod
    def _which_failed(src_fd: int, src_pos: int, out: int, out_pos: int) -> bool:
        """After a failed sendfile: True when our own file is at fault. The
        source is read alone (one byte, pread); if that fails, or reads
        nothing, the source is at fault (an error of the leader's log dir
        must not take ours offline), else ours is."""
        try:
            return len(os.pread(src_fd, 1, src_pos)) == 1
        except OSError:
            return False
