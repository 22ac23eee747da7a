"""Disk space reserved just past a segment's end, so appends do not allocate it.

Owns: the ``fallocate(FALLOC_FL_KEEP_SIZE)`` reservations of an active
segment and giving them back when the segment stops being appended to. The
file's size stays the log's size, so readers, recovery, ``dump-log`` and the
log format (docs/spec/log-format.md) see nothing of it; only the blocks the
file system holds for it (``du``) run ahead.

Why: an ``os.write`` past the end of a file makes the file system find and
account blocks for every new page, inside the append. Reserved ahead in one
call, that work leaves the append path: appending 512 MiB in 1 MiB writes to
a fresh file here ran at 1.1-3.0x the speed of plain appends (ext4, the
2-vCPU development VM, ``docs/benchmarks-history.md``), and the reservation itself
took about 1 ms for 512 MiB.

How much: a segment reserves ahead as much as it already holds, doubling,
capped at ``log.preallocate.bytes`` (and at the segment size), so a
partition that receives little reserves little: at most the cap per active
segment, and never more than twice its data. A roll and a clean close give
back what lies past the end; a crash leaves it
until that segment rolls, and a truncation drops it with the bytes cut.
Giving back is a truncation to the same size (a hole punched past the end
frees nothing on ext4), with the segment's modification time kept.

A file system without ``fallocate`` (some network or overlay ones) answers
EOPNOTSUPP: the reservation is then off for that log, silently, as appends
work without it.
"""

from __future__ import annotations

import ctypes
import errno
import os

_KEEP_SIZE = 0x01
_MIN_AHEAD = 1 << 20

_libc = None


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if _libc.fallocate(fd, mode, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class Reservation:
    """The reservation past the end of one segment file (its active fd).

    ``limit`` is the most reserved ahead (0: never); ``segment_bytes`` the
    size past which the segment rolls, so nothing is reserved beyond it.
    Neither method raises: a reservation that fails is only a slower append,
    and a disk that fails says so on the append itself.
    """

    __slots__ = ("limit", "segment_bytes", "reserved_to")

    def __init__(self, limit: int, segment_bytes: int, size: int):
        self.limit = limit
        self.segment_bytes = segment_bytes
        self.reserved_to = size  # file position up to which blocks are reserved

    def after_append(self, fd: int, size: int) -> None:
        """The segment is now ``size`` bytes: reserve more when the end came near."""
        if not self.limit:
            return
        ahead = min(self.limit, max(size, _MIN_AHEAD))
        if size + ahead // 2 < self.reserved_to:
            return
        end = min(size + ahead, max(self.segment_bytes, size))
        if end <= self.reserved_to:
            return
        try:
            _fallocate(fd, _KEEP_SIZE, self.reserved_to, end - self.reserved_to)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                self.limit = 0  # not supported here (or failing): append without
            return
        self.reserved_to = end

    def give_back(self, fd: int, size: int) -> None:
        """The segment stays ``size`` bytes (rolled, or closing): free what lies past it.

        A hole punched past the end does nothing on ext4; truncating to the
        same size frees every block past it. The segment's modification time
        is what retention and offsets-by-time go by, so it is put back."""
        if self.reserved_to > size:
            try:
                before = os.fstat(fd)
                if before.st_size == size:
                    os.ftruncate(fd, size)
                    os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
            except OSError:
                pass  # kept until the file goes; it holds no data
        self.reserved_to = size
