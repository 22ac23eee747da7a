"""One partition's log on disk: append, roll, flush, retention, deletion.

A :class:`PartitionLog` is owned by the writer process of its log dir; it is
not thread safe, and no other process writes its files. Request handlers in
other processes never hold one: they read what the writer publishes (log end
offset, segment bases) and read segment files directly, so every byte below the
log end offset stays in place until retention deletes its whole segment.

Files, under ``<log dir>/<topic>_<partition>/``:

- ``partition.json``: topic, partition, partition count and the topic config
  overrides (with the change stamp of the ALTER_TOPIC they come from, and
  the largest ``max.message.bytes`` ever set, which recovery checks against),
  written atomically at creation before any segment and at each change, and
  read back at open (its format and checks: ``partition_file.py``).
- ``topic-change.json`` in partition 0's dir: the topic's last change
  decided, written by the handler that decided it (``handler_alter.py``);
  the log never reads it.
- ``<20-digit base offset>.kafka``: segments. Only the last (active) one is
  appended to; a segment with base ``b`` holds the entry at offset ``o`` at file
  position ``o - b`` (docs/spec/log-format.md).

Appends go to the page cache with ``os.write``, into disk space the active
segment reserved ahead (``prealloc.py``); durability comes from the flush
policy (``flush.messages`` / ``flush.ms``), which the writer drives with
:meth:`PartitionLog.flush_due` and :meth:`PartitionLog.flush`.
:attr:`PartitionLog.flushed_offset` is the offset below which every byte has
been fdatasync'ed: a flush syncs the active segment, and a roll syncs the old
segment before the new one is created, so a segment stops being the last one
only once it is durable.

After a crash, :meth:`PartitionLog.open` with ``recover=True`` scans segments
and cuts the log at the first invalid entry. Given a *recovery point* (an
offset the log dir's checkpoint recorded as flushed, see ``logdir.py``) it
scans only from the last segment whose base is at or below it; the earlier
segments are trusted unread. That is safe twice over: they were durable when
the point was recorded, and they are not the last segment on disk, which
rolling made durable whatever happened since (a truncation or a re-created
partition can leave a checkpointed offset stale, never the segments below it
unsynced). A point past the log end found on disk, or segment sizes that do
not line up with their bases, mean files were lost: every segment is scanned.
Recovery fdatasyncs what it scanned and kept, so afterwards the whole log is
flushed and :attr:`PartitionLog.flushed_offset` starts at the log end. After a
clean shutdown only the tail of the last segment is checked (the scans and
cuts live in ``recovery.py``). Truncation, and a follower's restart at its
leader's log start, are ``partition_cuts.py``'s (mixed into
:class:`PartitionLog`).

A replica placed on one of this broker's log dirs follows its leader by
copying the leader's segment bytes (:meth:`PartitionLog.append_copy`, file
to file with ``os.sendfile``): the same offsets, and a new segment exactly
where the leader's starts, so the two logs' files match.

A partition dir that cannot be opened (partition.json unreadable or invalid, a
segment that is not a regular file or cannot be opened) raises StorageError
with one line naming the file and the problem; the log dir takes only that
partition offline (``logdir.py``).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Mapping

from hostbroker.errors import ConfigError, ErrorCode, HostbrokerError, StorageError
from hostbroker.log import recovery
from hostbroker.log.config import LogConfig
from hostbroker.log.prealloc import Reservation
from hostbroker.log.files import (fsync_dir, kind_of, move_to_trash, open_file, remove_any,
                                  storage_errors, write_file_atomically)
from hostbroker.log.partition_copy import CopySourceError, LogCopy  # noqa: F401 (re-exported)
from hostbroker.log.partition_config import LogConfigChanges
from hostbroker.log.partition_cuts import APPEND_FLAGS, LogCuts
from hostbroker.log.partition_file import (PARTITION_FILE, format_partition_file,
                                           read_partition_counters, read_partition_meta)
from hostbroker.log.recovery import RecoveryStats
from hostbroker.log.segments import (parse_segment_filename, partition_dirname,
                                     segment_filename)

log = logging.getLogger(__name__)



Clock = Callable[[], int]


class SegmentDeleteError(StorageError):
    """Retention could not delete a segment (an immutable file, say): the log is intact
    and serves on; the segment is retried at the next retention check."""


def wall_clock_ms() -> int:
    """Milliseconds since the epoch; the default clock."""
    return time.time_ns() // 1_000_000


class PartitionLog(LogCuts, LogCopy, LogConfigChanges):
    """The segments of one partition, appended to by the writer that owns it.

    Build with :meth:`create` or :meth:`open`; the constructor does no I/O.
    """

    def __init__(self, path: str, topic: str, partition: int, num_partitions: int,
                 overrides: Mapping[str, str], config: LogConfig, clock: Clock,
                 bases: list[int], log_end_offset: int, active_fd: int,
                 recovery_stats: RecoveryStats = RecoveryStats(), replicated: bool = False,
                 placement: str | None = None, stamp: int = 0, max_message_bytes_seen: int = 0):
        self._path = path
        self._stamp = stamp  # the ALTER_TOPIC change whose config this is (0: none)
        # recovery's limit: never below any max.message.bytes the partition had
        self._max_seen = max(max_message_bytes_seen, config.max_message_bytes)
        self._replicated = replicated
        self._placement = placement
        self._copy: tuple[int, int, int] | None = None  # (active fd, its base, copy fd)
        self._topic = topic
        self._partition = partition
        self._num_partitions = num_partitions
        self._overrides = dict(overrides)
        self._config = config
        self._clock = clock
        self._bases = bases
        self._log_end = log_end_offset
        self._fd: int | None = active_fd
        self._reservation = Reservation(config.preallocate_bytes, config.segment_bytes,
                                        log_end_offset - bases[-1])
        # A clean open or a recovery (which syncs what it scanned) leaves nothing unflushed.
        self._flushed_offset = log_end_offset
        self._recovery_stats = recovery_stats
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None

    # ----------------------------------------------------------- construction

    @classmethod
    def create(cls, log_dir: str, topic: str, partition: int, num_partitions: int,
               config_overrides: Mapping[str, str], defaults: LogConfig,
               clock: Clock = wall_clock_ms, replicated: bool = False,
               placement: str | None = None, stamp: int = 0) -> PartitionLog:
        """Create ``<log_dir>/<topic>_<partition>/`` with partition.json and an empty segment.

        ``replicated``: a replica of a replicated topic (recorded in
        partition.json); ``placement`` "log_dirs": one placed on a log dir of
        this broker (docs/storage.md, "Replicas across log dirs"); ``stamp``:
        the ALTER_TOPIC change whose config it starts with (see :meth:`alter`).

        Raises InvalidTopicError, ConfigError (bad overrides; nothing is written),
        a HostbrokerError with TOPIC_ALREADY_EXISTS if the directory exists, and
        StorageError when the disk fails.
        """
        name = partition_dirname(topic, partition)
        if not 0 <= partition < num_partitions:
            raise ValueError(f"partition {partition} is outside 0..{num_partitions - 1}")
        config = defaults.with_overrides(config_overrides)
        overrides = config.overrides_of(config_overrides)
        meta = format_partition_file(topic, partition, num_partitions, overrides, replicated,
                                     placement, stamp)
        path = os.path.join(log_dir, name)
        with storage_errors(f"cannot create partition dir {path}"):
            try:
                os.mkdir(path)
            except FileExistsError:
                raise HostbrokerError(f"partition dir {path} already exists",
                                      ErrorCode.TOPIC_ALREADY_EXISTS) from None
            write_file_atomically(os.path.join(path, PARTITION_FILE), meta)
            fd = open_file(os.path.join(path, segment_filename(0)),
                           APPEND_FLAGS | os.O_CREAT | os.O_EXCL)
            fsync_dir(path)
            fsync_dir(log_dir)
        return cls(path, topic, partition, num_partitions, overrides, config, clock, [0], 0, fd,
                   replicated=replicated, placement=placement, stamp=stamp)

    @classmethod
    def open(cls, path: str, defaults: LogConfig, clock: Clock = wall_clock_ms,
             recover: bool = True, recovery_point: int | None = None) -> PartitionLog:
        """Open an existing partition dir for appending.

        With ``recover`` (after a crash) the segments from the last one whose
        base is at or below ``recovery_point`` through the end are scanned,
        and the log is cut at the first invalid entry (the file truncated
        there, later segments removed); the segments before are trusted, as
        everything below ``recovery_point`` must have been flushed. None or 0
        scans them all, and so does a point past the log end on disk. An entry
        longer than the largest ``max.message.bytes`` the partition ever had
        (``max_message_bytes_seen`` in partition.json) counts as invalid
        (docs/spec/log-format.md): lowering the setting limits what produces
        add, never what recovery keeps. The scan runs at roughly 100 MB/s
        for 100-byte entries, bound by the CRC; what it scanned and kept is fdatasync'ed.
        :attr:`recovery_stats` says what was scanned.

        Without ``recover`` (after a clean shutdown) ``recovery_point`` is the
        log end the shutdown recorded, and only the tail of the last segment
        is checked against it (``recovery.verify_tail``). Either way, segment
        sizes that do not line up with their base offsets mean files were
        lost, and every segment is recovered.

        Raises StorageError naming the file and the problem for a missing,
        unreadable or invalid partition.json, a segment that is not a regular
        file or cannot be opened for appending, or a failing disk;
        ValueError for a negative ``recovery_point``.
        """
        if recovery_point is not None and recovery_point < 0:
            raise ValueError(f"negative recovery point {recovery_point}")
        topic, partition, num_partitions, overrides, replicated, placement, stamp, seen = \
            read_partition_counters(path)
        try:
            config = defaults.with_overrides(overrides)
        except ConfigError as exc:
            raise StorageError(f"{os.path.join(path, PARTITION_FILE)} is not a valid partition "
                               f"file: config {exc}") from None
        stats = RecoveryStats()
        # a lowered max.message.bytes limits produces, not what is stored already
        limit = max(seen, config.max_message_bytes)
        with storage_errors(f"cannot open partition {path}"):
            bases, sizes = cls._list_segments(path)
            contiguous = all(bases[i] + sizes[i] == bases[i + 1] for i in range(len(bases) - 1))
            if not contiguous:
                log.warning("%s: segment sizes do not match their base offsets; recovering "
                            "every segment", path)
            if recover or not contiguous:
                first = recovery.first_to_scan(path, bases, sizes,
                                               (recovery_point or 0) if contiguous else 0)
                bases, sizes, stats = recovery.recover(path, bases, sizes,
                                                       limit, first)
            else:
                bases, sizes = recovery.verify_tail(path, bases, sizes,
                                                    limit, recovery_point)
        active = os.path.join(path, segment_filename(bases[-1]))
        with storage_errors(f"cannot open {active} for appending"):
            fd = open_file(active, APPEND_FLAGS)
        return cls(path, topic, partition, num_partitions, overrides, config, clock,
                   bases, bases[-1] + sizes[-1], fd, stats, replicated, placement, stamp, seen)

    @staticmethod
    def _list_segments(path: str) -> tuple[list[int], list[int]]:
        bases = sorted(base for base in map(parse_segment_filename, os.listdir(path))
                       if base is not None)
        if not bases:
            # Creation stopped between partition.json and the first segment.
            os.close(open_file(os.path.join(path, segment_filename(0)),
                               os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            fsync_dir(path)
            bases = [0]
        sizes = []
        for base in bases:
            segment = os.path.join(path, segment_filename(base))
            info = os.lstat(segment)  # a link is not followed
            if not stat.S_ISREG(info.st_mode):
                raise StorageError(f"segment {segment} is not a regular file: it is "
                                   f"{kind_of(info.st_mode)}")
            sizes.append(info.st_size)
        return bases, sizes

    # ------------------------------------------------------------- properties

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic had when this one was created."""
        return self._num_partitions

    @property
    def path(self) -> str:
        return self._path

    @property
    def replicated(self) -> bool:
        """A replica of a replicated topic (partition.json says so)."""
        return self._replicated

    @property
    def placement(self) -> str | None:
        """"log_dirs" for a replica placed on this broker's log dirs, else None."""
        return self._placement

    @property
    def config(self) -> LogConfig:
        """The effective config: the broker defaults with this topic's overrides."""
        return self._config

    @property
    def overrides(self) -> dict[str, str]:
        """The topic config keys set for this topic, as persisted."""
        return dict(self._overrides)

    @property
    def log_start_offset(self) -> int:
        return self._bases[0]

    @property
    def log_end_offset(self) -> int:
        return self._log_end

    @property
    def flushed_offset(self) -> int:
        """Every byte below this offset is on disk (fdatasync'ed)."""
        return self._flushed_offset

    @property
    def recovery_stats(self) -> RecoveryStats:
        """What :meth:`open` scanned and trusted; all zero when it ran no recovery."""
        return self._recovery_stats

    @property
    def segment_bases(self) -> list[int]:
        return list(self._bases)

    def segment_path(self, base_offset: int) -> str:
        return os.path.join(self._path, segment_filename(base_offset))

    def segment_mtimes(self) -> list[tuple[int, int]]:
        """Return (base offset, file mtime in ms) of every segment, oldest first."""
        with storage_errors(f"cannot stat segments of {self._path}"):
            return [(base, os.stat(self.segment_path(base)).st_mtime_ns // 1_000_000)
                    for base in self._bases]

    # ----------------------------------------------------------------- append

    def _active_fd(self) -> int:
        if self._fd is None:
            raise StorageError(f"partition {self._path} is closed")
        return self._fd

    def append(self, message_set, message_count: int) -> tuple[int, int]:
        """Append a validated message set whole; return (its base offset, new log end).

        Rolls to a new segment first when the active one holds data and the set
        would take it past ``segment.bytes``; a set larger than that goes whole
        into a fresh segment. Raises StorageError if the disk fails, after
        cutting off whatever part of the set reached the file.
        """
        view = memoryview(message_set).cast("B")
        size = len(view)
        base = self._log_end
        if size == 0:
            return base, base
        fd = self._active_fd()
        active_size = base - self._bases[-1]
        if active_size > 0 and active_size + size > self._config.segment_bytes:
            self._roll()
            fd = self._fd
        try:
            written = 0
            while written < size:
                written += os.write(fd, view[written:])
        except OSError as exc:
            self._cut_failed_append(fd, base - self._bases[-1])
            raise StorageError(f"cannot append to {self._path}: {exc.strerror or exc}") from exc
        self._log_end = base + size
        self._reservation.after_append(fd, self._log_end - self._bases[-1])
        self._unflushed_messages += message_count
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = self._clock()
        return base, self._log_end

    def _cut_failed_append(self, fd: int, length: int) -> None:
        try:
            os.ftruncate(fd, length)
        except OSError as exc:
            # The log dir is failing anyway; a restart's recovery and truncate_to
            # remove the unacknowledged bytes.
            log.error("%s: cannot cut a failed append: %s", self._path, exc)

    def _roll(self) -> None:
        """Start a new active segment at the log end, after syncing the old one."""
        old_fd = self._active_fd()
        new_base = self._log_end
        with storage_errors(f"cannot roll a segment in {self._path}"):
            # Later flushes sync only the active segment, so the old one is made
            # durable now, and the directory with it so that both entries exist.
            os.fdatasync(old_fd)
            self._reservation.give_back(old_fd, new_base - self._bases[-1])
            new_path = self.segment_path(new_base)
            if os.path.lexists(new_path):  # not a segment of ours: bases list every one
                log.warning("%s: removing %s in the way of a new segment", self._path, new_path)
                remove_any(new_path)  # a file, a link or a directory
            new_fd = open_file(new_path, APPEND_FLAGS | os.O_CREAT | os.O_EXCL)
            self._fd = new_fd
            self._reservation = Reservation(self._config.preallocate_bytes,
                                            self._config.segment_bytes, 0)
            os.close(old_fd)
            fsync_dir(self._path)
        self._bases.append(new_base)
        self._mark_flushed(new_base)

    # ------------------------------------------------------------------ flush

    def _mark_flushed(self, offset: int) -> None:
        self._flushed_offset = offset
        if offset >= self._log_end:
            self._unflushed_messages = 0
            self._first_unflushed_ms = None

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def next_flush_deadline_ms(self) -> int | None:
        """When unflushed data becomes due by ``flush.ms``; None if all is flushed."""
        if self._first_unflushed_ms is None:
            return None
        return self._first_unflushed_ms + self._config.flush_ms

    def flush_due(self, now_ms: int) -> bool:
        """True when ``flush.messages`` messages or ``flush.ms`` of data are unflushed."""
        if self._unflushed_messages >= self._config.flush_messages:
            return True
        deadline = self.next_flush_deadline_ms()
        return deadline is not None and now_ms >= deadline

    def flush(self) -> int:
        """fdatasync what was appended since the last flush; return the flushed offset."""
        if self._flushed_offset < self._log_end:
            with storage_errors(f"cannot flush {self._path}"):
                os.fdatasync(self._active_fd())
        self._mark_flushed(self._log_end)
        return self._flushed_offset

    def flush_begin(self) -> tuple[int, int] | None:
        """Hand a flush of everything appended so far to another thread.

        Returns ``(fd, offset)``: a duplicate of the active segment's descriptor
        (the caller fdatasyncs and closes it; a later roll or close cannot pull
        it away) and the offset that flush makes durable; or None when all is
        flushed. Only the active segment can hold unflushed data: a roll syncs
        the old one. The flush policy restarts counting now; the flushed
        offset moves only at :meth:`flush_end`, once the fdatasync returned.
        """
        if self._flushed_offset >= self._log_end:
            return None
        with storage_errors(f"cannot flush {self._path}"):
            fd = os.dup(self._active_fd())
        self._unflushed_messages = 0
        self._first_unflushed_ms = None
        return fd, self._log_end

    def flush_end(self, offset: int) -> None:
        """Record that a flush begun with :meth:`flush_begin` made ``offset`` durable."""
        if offset > self._flushed_offset:
            self._flushed_offset = offset

    # -------------------------------------------------------------- retention

    def enforce_retention(self, now_ms: int) -> list[int]:
        """Delete whole old segments per docs/spec/log-format.md "Retention"; return their bases.

        By time: the oldest segments whose mtime is more than ``retention.ms``
        before ``now_ms``. If all of them qualify, a new empty segment is rolled
        at the log end first, so the log end never moves backwards. By size:
        the oldest segments while the partition is larger than
        ``retention.bytes``. The active segment is never deleted. Raises
        SegmentDeleteError when a segment cannot be deleted (those before it
        are; the log starts at it), StorageError when the disk fails.
        """
        deleted: list[int] = []
        if self._config.retention_ms >= 0:
            oldest_kept = now_ms - self._config.retention_ms
            expired = 0
            for _, mtime in self.segment_mtimes():
                if mtime >= oldest_kept:
                    break
                expired += 1
            if expired == len(self._bases):
                if self._log_end > self._bases[-1]:
                    self._roll()
                expired = len(self._bases) - 1
            deleted += self._delete_oldest(expired)
        if self._config.retention_bytes >= 0:
            excess = self._log_end - self._bases[0] - self._config.retention_bytes
            count = 0
            while count < len(self._bases) - 1 and excess > 0:
                excess -= self._bases[count + 1] - self._bases[count]
                count += 1
            deleted += self._delete_oldest(count)
        return deleted

    def _delete_oldest(self, count: int) -> list[int]:
        """Delete the ``count`` oldest segments, oldest first, stopping at the first that
        cannot be: SegmentDeleteError then, with the log start at the oldest one left."""
        deleted: list[int] = []
        try:
            for base in self._bases[:count]:
                segment = self.segment_path(base)
                try:
                    os.unlink(segment)
                except OSError as exc:
                    raise SegmentDeleteError(f"cannot delete segment {segment}: "
                                             f"{exc.strerror or exc}") from exc
                deleted.append(base)
                del self._bases[0]
        finally:
            if deleted:
                with storage_errors(f"cannot delete segments of {self._path}"):
                    fsync_dir(self._path)
        return deleted

    # ------------------------------------------------------------------ close

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to) and close the active segment.

        Closing twice does nothing.
        """
        if self._fd is None:
            return
        self._drop_copy_fd()
        try:
            if flush:
                self.flush()
        finally:
            fd, self._fd = self._fd, None
            self._reservation.give_back(fd, self._log_end - self._bases[-1])
            with storage_errors(f"cannot close {self._path}"):
                os.close(fd)

    def delete(self, trash: str) -> None:
        """Remove the partition dir and everything in it, moving it into ``trash`` first.

        ``trash`` is a directory on the same file system (the log dir's
        ``.trash/``, see ``logdir.py``); the dir is renamed into it under a
        short name of its own, so that a crash midway leaves it where
        LogDir.open finishes removing it, and no name derived for a deletion
        is longer than the partition's. Raises StorageError naming the dir
        when the rename or removal fails; the log is closed either way.
        """
        self._drop_copy_fd()
        with storage_errors(f"cannot delete {self._path}"):
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)
        move_to_trash(self._path, trash, self._clock())

