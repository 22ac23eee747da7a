"""One log dir (normally one disk) and the partitions stored in it.

A :class:`LogDir` is owned by the writer process of that dir and is not thread
safe. It holds an exclusive ``flock`` on ``<dir>/.lock`` for its lifetime, so
two brokers never write the same dir. Its state on disk:

- ``<topic>_<partition>/``: one partition each (see ``partition.py``).
- ``<topic>_<partition>.deleted-<ms>/``: a partition whose deletion a crash
  interrupted; removed on open.
- ``.clean_shutdown``: written by :meth:`LogDir.close` after every partition is
  flushed. When present on open, the partitions are trusted without a
  recovery scan; the marker is removed before anything is written again.
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
checkpoints existed.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
from collections.abc import Mapping

from hostbroker.errors import ErrorCode, HostbrokerError, InvalidTopicError, StorageError
from hostbroker.log.config import LogConfig
from hostbroker.log.partition import (DELETED_MARKER, PARTITION_FILE, Clock, PartitionLog,
                                      RecoveryStats, fsync_dir, storage_errors, wall_clock_ms,
                                      write_file_atomically)
from hostbroker.log.segments import (parse_partition_dirname, parse_segment_filename,
                                     validate_topic_name)

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
CHECKPOINT_VERSION = 0

PartitionKey = tuple[str, int]

_CHECKPOINT_NUMBER = re.compile(r"[0-9]{1,19}")

# A partition dir name always ends in "_<digits>", so no topic name can look like this.
_DELETED_DIR = re.compile(r".+_[0-9]+" + re.escape(DELETED_MARKER) + r"[0-9]+")


def _take_lock(path: str) -> int:
    lock_path = os.path.join(path, LOCK_FILE)
    with storage_errors(f"log dir {path} is unusable"):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StorageError(f"log dir {path} is in use by another broker (lock {lock_path})") from None
    return fd


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


def _read_recovery_points(path: str) -> tuple[dict[PartitionKey, int], bytes | None]:
    """Return the checkpointed recovery points of a log dir and the file's bytes.

    Missing, unreadable or garbled is ({}, None): every segment gets scanned.
    """
    checkpoint = os.path.join(path, CHECKPOINT_FILE)
    try:
        with open(checkpoint, "rb") as checkpoint_file:
            data = checkpoint_file.read()
        return parse_recovery_points(data), data
    except FileNotFoundError:
        log.info("%s: no %s; recovering every segment", path, CHECKPOINT_FILE)
    except (OSError, ValueError) as exc:
        log.warning("%s: ignoring %s (%s); recovering every segment", path, CHECKPOINT_FILE, exc)
    return {}, None


class LogDir:
    """The partitions of one log dir. Build with :meth:`open`; the constructor does no I/O."""

    def __init__(self, path: str, defaults: LogConfig, clock: Clock, lock_fd: int,
                 partitions: dict[PartitionKey, PartitionLog], recovered: bool,
                 checkpoint: bytes | None = None):
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

    @classmethod
    def open(cls, path: str, defaults: LogConfig, clock: Clock = wall_clock_ms) -> LogDir:
        """Lock ``path`` (creating it if missing) and open every partition in it.

        Without a clean-shutdown marker every partition is recovered: scanned
        from the segment holding its checkpointed recovery point (all of it
        without one) and cut at its first invalid entry; then the checkpoint
        is written, recording the recovered logs as flushed. With the marker
        nothing is scanned. Raises StorageError, with a one-line message, for a
        dir that cannot be used or is locked.
        """
        with storage_errors(f"log dir {path} is unusable"):
            os.makedirs(path, exist_ok=True)
        lock_fd = _take_lock(path)
        partitions: dict[PartitionKey, PartitionLog] = {}
        try:
            with storage_errors(f"log dir {path} is unusable"):
                marker = os.path.join(path, CLEAN_SHUTDOWN_FILE)
                clean = os.path.exists(marker)
                points, checkpoint = ({}, None) if clean else _read_recovery_points(path)
                for name in sorted(os.listdir(path)):
                    full = os.path.join(path, name)
                    if _DELETED_DIR.fullmatch(name) and os.path.isdir(full):
                        shutil.rmtree(full)
                        continue
                    key = parse_partition_dirname(name)
                    if key is None or not os.path.isdir(full):
                        continue
                    if not os.path.exists(os.path.join(full, PARTITION_FILE)):
                        _remove_unfinished(full)
                        continue
                    partition = PartitionLog.open(full, defaults, clock, recover=not clean,
                                                  recovery_point=points.get(key, 0))
                    partitions[(partition.topic, partition.partition)] = partition
                if clean:
                    os.unlink(marker)
                fsync_dir(path)
            logdir = cls(path, defaults, clock, lock_fd, partitions, recovered=not clean,
                         checkpoint=checkpoint)
            if not clean:
                log.info("%s: %s", path, logdir.recovery_stats)
                # A crash while starting up need not scan the same segments again.
                logdir.checkpoint_recovery_points()
        except BaseException:
            for partition in partitions.values():
                partition.close()
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
        """Remove a partition and its data. Raises UNKNOWN_TOPIC_OR_PARTITION if absent."""
        log = self.partitions.pop((topic, partition), None)
        if log is None:
            raise HostbrokerError(f"no partition {topic}-{partition} in {self._path}",
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        log.delete()

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
            fd = os.open(os.path.join(self._path, CLEAN_SHUTDOWN_FILE),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self._path)
