"""One log dir (normally one disk) and the partitions stored in it.

A :class:`LogDir` is owned by the writer process of that dir and is not thread
safe. It holds an exclusive ``flock`` on ``<dir>/.lock`` for its lifetime, so
two brokers never write the same dir. Its state on disk:

- ``<topic>_<partition>/``: one partition each (see ``partition.py``).
- ``.trash/<ms>-<pid>-<n>/``: a deleted partition dir, renamed there before
  its files are removed, so that a crash midway leaves it where open finishes
  removing it. The short name keeps every name derived for a deletion within
  the file-name limit whatever the topic's length. (``<topic>_<partition>
  .deleted-<ms>/`` dirs of older versions are removed on open too.)
- ``.clean_shutdown``: written by :meth:`LogDir.close` after every partition is
  flushed. When present on open, no recovery scan runs: only the tail of each
  partition's last segment is checked against the log end the checkpoint
  recorded at the shutdown (``recovery.py``); the marker is removed before
  anything is written again.
- ``recovery-point-offset-checkpoint``: each partition's *recovery point*,
  the offset below which its log is known to be on disk, so that recovery
  after a crash scans only what was written since (docs/spec/log-format.md,
  "Recovery")::

      0                      version
      2                      how many partitions follow
      page_views 0 536870912 topic, partition, recovery point
      page_views 1 1048576

  ASCII, one space between fields (topic names hold none), a newline after
  every line, sorted by topic and partition. A partition with no line has
  recovery point 0.

The writer calls :meth:`LogDir.checkpoint_recovery_points` now and then (after
flushes, rate-limited); :meth:`LogDir.open` writes it after a recovery and
:meth:`LogDir.close` before the clean-shutdown marker. Each write replaces the
file atomically (temporary file, fsync, rename, fsync of the dir) and is
skipped when its content would not change.

Why skipping is safe: the offset recorded for a partition is its
:attr:`PartitionLog.flushed_offset`, not its log end, and that offset moves
only once the bytes below it have been fdatasync'ed (by a flush, a roll, a
truncation or a recovery). So whatever a crash of the host can lose or leave
as garbage lies at or above the recorded point, in the segment holding it or
a later one, and that is where recovery starts. A line gone stale (the
partition truncated, or deleted and created again, since the write) is still
safe, see ``partition.py``. A missing, unreadable or garbled checkpoint is
not an error: every segment of every partition is scanned, as before
checkpoints existed (after a clean shutdown: every last segment).

Damage is isolated. A partition dir that cannot be opened (partition.json
unreadable, invalid or naming another partition; a segment that is not a
regular file or cannot be opened or cut; segments without a partition.json;
a file where the dir should be) is left as it is and listed in
:attr:`LogDir.offline` with one log line naming the file and the problem;
every other partition opens. Only a log dir that cannot be listed, locked or
written at all fails :meth:`LogDir.open`. A partition is always named by its
dir name, so an offline one can be reported and deleted even when its
partition.json is unreadable.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import stat
from collections.abc import Mapping

from hostbroker.errors import ErrorCode, HostbrokerError, InvalidTopicError, StorageError
from hostbroker.log.config import LogConfig
from hostbroker.log.files import (DIR_MODE, describe, fsync_dir, kind_of, move_to_trash,
                                  open_lock_file, read_file, remove_any, remove_tree,
                                  storage_errors, write_file_atomically)
from hostbroker.log.partition import Clock, PartitionLog, wall_clock_ms
from hostbroker.log.partition_file import PARTITION_FILE
from hostbroker.log.recovery import RecoveryStats
from hostbroker.log.segments import (parse_partition_dirname, parse_segment_filename,
                                     partition_dirname, validate_topic_name)

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
CHECKPOINT_VERSION = 0
TRASH_DIR = ".trash"
# 65,536 partitions (max.partitions) of 270-byte lines stay well below this.
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024

PartitionKey = tuple[str, int]

_CHECKPOINT_NUMBER = re.compile(r"[0-9]{1,19}")

# Deleted partition dirs of older versions (a partition dir name always ends
# in "_<digits>", so no topic name can look like this).
_DELETED_DIR = re.compile(r".+_[0-9]+\.deleted-[0-9]+")


class LogDirInUseError(StorageError):
    """Another broker holds the log dir's lock: a configuration error, not damage."""


def _take_lock(path: str) -> int:
    lock_path = os.path.join(path, LOCK_FILE)
    with storage_errors(f"log dir {path} is unusable: {lock_path}"):
        fd = open_lock_file(lock_path, "the log dir's lock file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LogDirInUseError(f"log dir {path} is in use by another broker "
                               f"(lock {lock_path})") from None
    return fd


def _clean_marker(marker: str) -> bool:
    """Whether the clean-shutdown marker is there: only a regular file counts (a
    link, a directory or anything else is not one, and means a recovery)."""
    try:
        info = os.lstat(marker)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(info.st_mode):
        return True
    log.warning("%s: %s is %s, not a regular file; recovering as after a crash",
                os.path.dirname(marker), CLEAN_SHUTDOWN_FILE, kind_of(info.st_mode))
    return False


def _remove_clean_marker(marker: str) -> None:
    """Remove the marker (whatever is there) before anything is written again."""
    try:
        remove_any(marker)
    except OSError as exc:
        # unremovable: the next open must not trust it, so the log dir cannot be used
        raise StorageError(f"cannot remove {marker}: {describe(exc)}") from exc


def _remove_unfinished(path: str) -> None:
    """Remove a partition dir whose creation stopped before partition.json existed.

    Creation writes partition.json before any segment, so such a dir holds no
    data; one with segments is not ours to guess about.
    """
    if any(parse_segment_filename(name) is not None for name in os.listdir(path)):
        raise StorageError(f"{path} holds segments but no {PARTITION_FILE}")
    shutil.rmtree(path)


def format_recovery_points(points: Mapping[PartitionKey, int]) -> bytes:
    """Return the checkpoint file content recording ``points``."""
    lines = [str(CHECKPOINT_VERSION), str(len(points))]
    lines += [f"{topic} {partition} {offset}"
              for (topic, partition), offset in sorted(points.items())]
    return "".join(line + "\n" for line in lines).encode("ascii")


def parse_recovery_points(data: bytes) -> dict[PartitionKey, int]:
    """Return the recovery points a checkpoint file holds.

    Raises ValueError for anything :func:`format_recovery_points` would not
    have written: another version, a count that does not match the lines, a
    malformed or repeated line, a missing final newline.
    """
    text = data.decode("ascii")
    if not text.endswith("\n"):
        raise ValueError("the last line is cut off")
    lines = text[:-1].split("\n")
    if len(lines) < 2:
        raise ValueError("no version and count lines")
    version, count, entries = lines[0], lines[1], lines[2:]
    if version != str(CHECKPOINT_VERSION):
        raise ValueError(f"unknown version {version!r}")
    if not _CHECKPOINT_NUMBER.fullmatch(count) or int(count) != len(entries):
        raise ValueError(f"count {count!r} does not match its {len(entries)} lines")
    points: dict[PartitionKey, int] = {}
    for entry in entries:
        fields = entry.split(" ")
        if len(fields) != 3 or not all(map(_CHECKPOINT_NUMBER.fullmatch, fields[1:])):
            raise ValueError(f"malformed line {entry!r}")
        try:
            validate_topic_name(fields[0])
        except InvalidTopicError:
            raise ValueError(f"malformed line {entry!r}") from None
        key = (fields[0], int(fields[1]))
        if key in points:
            raise ValueError(f"{key[0]} {key[1]} appears twice")
        points[key] = int(fields[2])
    return points


def _read_recovery_points(path: str, clean: bool) -> tuple[dict[PartitionKey, int], bytes | None]:
    """Return the checkpointed recovery points of a log dir and the file's bytes.

    Missing, unreadable or garbled is ({}, None): every segment gets scanned
    (after a clean shutdown: every last segment, whole).
    """
    checkpoint = os.path.join(path, CHECKPOINT_FILE)
    fallback = "checking every last segment whole" if clean else "recovering every segment"
    try:
        data = read_file(checkpoint, MAX_CHECKPOINT_BYTES)
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise ValueError(f"longer than {MAX_CHECKPOINT_BYTES} bytes")
        return parse_recovery_points(data), data
    except FileNotFoundError:
        log.info("%s: no %s; %s", path, CHECKPOINT_FILE, fallback)
    except OSError as exc:
        log.warning("%s: ignoring %s (%s); %s", path, CHECKPOINT_FILE, describe(exc), fallback)
    except ValueError as exc:
        log.warning("%s: ignoring %s (%s); %s", path, CHECKPOINT_FILE, exc, fallback)
    return {}, None


def _open_partition(full: str, defaults: LogConfig, clock: Clock, clean: bool,
                    point: int | None) -> PartitionLog | None:
    """Open one partition dir found at start; StorageError says why it cannot be.

    None: the dir was an unfinished creation, now removed.
    """
    info = os.lstat(full)
    if not stat.S_ISDIR(info.st_mode):  # a link to a directory is not followed
        raise StorageError(f"{full} is not a directory: it is {kind_of(info.st_mode)}")
    if not os.path.lexists(os.path.join(full, PARTITION_FILE)):
        with storage_errors(f"cannot remove the unfinished partition dir {full}"):
            _remove_unfinished(full)
        return None
    return PartitionLog.open(full, defaults, clock, recover=not clean, recovery_point=point)


def _empty_trash(trash: str) -> None:
    """Finish removing deleted partition dirs; what cannot be removed stays (logged)."""
    mode = os.lstat(trash).st_mode
    if not stat.S_ISDIR(mode):  # a link or a file in its place: never followed
        log.warning("%s: %s is %s, not a directory; removed", os.path.dirname(trash),
                    TRASH_DIR, kind_of(mode))
        remove_tree(trash)
        return
    try:
        names = os.listdir(trash)
    except OSError as exc:
        log.warning("%s: cannot list it (%s); left as it is", trash, exc.strerror or exc)
        return
    for name in names:
        remove_tree(os.path.join(trash, name))


class LogDir:
    """The partitions of one log dir. Build with :meth:`open`; the constructor does no I/O."""

    def __init__(self, path: str, defaults: LogConfig, clock: Clock, lock_fd: int,
                 partitions: dict[PartitionKey, PartitionLog], recovered: bool,
                 checkpoint: bytes | None = None,
                 offline: dict[PartitionKey, str] | None = None):
        self._path = path
        self._defaults = defaults
        self._clock = clock
        self._lock_fd: int | None = lock_fd
        self.partitions = partitions
        self._recovered = recovered
        self._recovery_stats = sum((partition.recovery_stats for partition in partitions.values()),
                                   RecoveryStats())
        # What the checkpoint file holds, as far as this object knows; None: unknown.
        self._checkpoint = checkpoint
        # Partitions found damaged at open, with the one-line reason; never opened.
        self.offline: dict[PartitionKey, str] = dict(offline or {})

    @classmethod
    def open(cls, path: str, defaults: LogConfig, clock: Clock = wall_clock_ms) -> LogDir:
        """Lock ``path`` (creating it if missing) and open every partition in it.

        Without a clean-shutdown marker every partition is recovered: scanned
        from the segment holding its checkpointed recovery point (all of it
        without one) and cut at its first invalid entry. With the marker only
        the tail of each last segment is checked against the log end the
        checkpoint recorded. Then the checkpoint is written, recording the
        logs as flushed. A partition that cannot be opened goes into
        :attr:`offline` instead (one log line each). Raises LogDirInUseError
        when another broker holds the dir, StorageError, with a one-line
        message, for a dir that cannot be used at all.
        """
        with storage_errors(f"log dir {path} is unusable"):
            os.makedirs(path, DIR_MODE, exist_ok=True)
        lock_fd = _take_lock(path)
        partitions: dict[PartitionKey, PartitionLog] = {}
        offline: dict[PartitionKey, str] = {}
        try:
            with storage_errors(f"log dir {path} is unusable"):
                marker = os.path.join(path, CLEAN_SHUTDOWN_FILE)
                clean = _clean_marker(marker)
                points, checkpoint = _read_recovery_points(path, clean)
                for name in sorted(os.listdir(path)):
                    full = os.path.join(path, name)
                    if name == TRASH_DIR:
                        _empty_trash(full)
                        continue
                    if _DELETED_DIR.fullmatch(name) and os.path.isdir(full) \
                            and not os.path.islink(full):
                        remove_tree(full)
                        continue
                    key = parse_partition_dirname(name)
                    if key is None:
                        continue
                    try:
                        partition = _open_partition(full, defaults, clock, clean, points.get(key))
                    except StorageError as exc:
                        log.error("%s: partition %s-%d is offline: %s", path, key[0], key[1], exc)
                        offline[key] = str(exc)
                        continue
                    if partition is not None:
                        partitions[key] = partition
                _remove_clean_marker(marker)
                fsync_dir(path)
            logdir = cls(path, defaults, clock, lock_fd, partitions, recovered=not clean,
                         checkpoint=checkpoint, offline=offline)
            if not clean:
                log.info("%s: %s", path, logdir.recovery_stats)
            # A crash while starting up need not scan the same segments again.
            logdir.checkpoint_recovery_points()
        except BaseException:
            for partition in partitions.values():
                partition.close(flush=False)
            os.close(lock_fd)
            raise
        return logdir

    @property
    def path(self) -> str:
        return self._path

    @property
    def defaults(self) -> LogConfig:
        return self._defaults

    @property
    def recovered(self) -> bool:
        """True when this open found no clean-shutdown marker and ran recovery."""
        return self._recovered

    @property
    def recovery_stats(self) -> RecoveryStats:
        """What :meth:`open` scanned and trusted unread, over all partitions.

        All zero after a clean shutdown.
        """
        return self._recovery_stats

    def checkpoint_recovery_points(self) -> bool:
        """Record every partition's flushed offset as its recovery point.

        Replaces the checkpoint file atomically, unless it would be unchanged;
        returns whether it wrote. A partition deleted since the last write
        loses its line. Raises StorageError when the disk fails or the log dir
        is closed.
        """
        if self._lock_fd is None:
            raise StorageError(f"log dir {self._path} is closed")
        data = format_recovery_points({key: partition.flushed_offset
                                       for key, partition in self.partitions.items()})
        if data == self._checkpoint:
            return False
        with storage_errors(f"cannot write {CHECKPOINT_FILE} in {self._path}"):
            write_file_atomically(os.path.join(self._path, CHECKPOINT_FILE), data)
        self._checkpoint = data
        return True

    def create_partition(self, topic: str, partition: int, num_partitions: int,
                         overrides: Mapping[str, str] | None = None) -> PartitionLog:
        """Create a new partition in this dir and return its log.

        Raises a HostbrokerError with TOPIC_ALREADY_EXISTS if it exists, and
        whatever :meth:`PartitionLog.create` raises.
        """
        if (topic, partition) in self.partitions:
            raise HostbrokerError(f"partition {topic}-{partition} already exists in {self._path}",
                                  ErrorCode.TOPIC_ALREADY_EXISTS)
        log = PartitionLog.create(self._path, topic, partition, num_partitions,
                                  overrides or {}, self._defaults, self._clock)
        self.partitions[(topic, partition)] = log
        return log

    def delete_partition(self, topic: str, partition: int) -> None:
        """Remove a partition and its data, whether it is open, offline or never opened here.

        The partition dir moves into ``.trash/`` first (see the module
        docstring). Raises UNKNOWN_TOPIC_OR_PARTITION if there is no such
        partition dir, and StorageError naming the dir if it cannot be moved;
        the partition is closed and forgotten either way, so a retry only
        needs the dir to be movable.
        """
        key = (topic, partition)
        log = self.partitions.pop(key, None)
        self.offline.pop(key, None)
        trash = os.path.join(self._path, TRASH_DIR)
        if log is not None:
            log.delete(trash)
            return
        path = os.path.join(self._path, partition_dirname(topic, partition))
        if not os.path.lexists(path):
            raise HostbrokerError(f"no partition {topic}-{partition} in {self._path}",
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        move_to_trash(path, trash, self._clock())

    def close(self, clean: bool = True) -> None:
        """Close every partition and release the lock.

        ``clean``: flush everything first, then write the recovery point
        checkpoint and the clean-shutdown marker, so the next open skips
        recovery. A writer whose disk failed closes with ``clean=False``: no
        flush, no checkpoint, no marker, and the next open recovers. If a
        partition cannot be flushed the marker is not written. Closing twice
        does nothing.
        """
        if self._lock_fd is None:
            return
        try:
            failures: list[StorageError] = []
            for log in self.partitions.values():
                try:
                    log.close(flush=clean)
                except StorageError as exc:
                    failures.append(exc)
            if failures:
                raise failures[0]
            if clean:
                self.checkpoint_recovery_points()
                self._write_clean_marker()
        finally:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _write_clean_marker(self) -> None:
        with storage_errors(f"cannot mark {self._path} cleanly shut down"):
            write_file_atomically(os.path.join(self._path, CLEAN_SHUTDOWN_FILE), b"")
