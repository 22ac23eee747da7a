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
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Mapping

from hostbroker.errors import ErrorCode, HostbrokerError, StorageError
from hostbroker.log.config import LogConfig
from hostbroker.log.partition import (DELETED_MARKER, PARTITION_FILE, Clock, PartitionLog,
                                      fsync_dir, storage_errors, wall_clock_ms)
from hostbroker.log.segments import parse_partition_dirname, parse_segment_filename

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"

PartitionKey = tuple[str, int]

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


class LogDir:
    """The partitions of one log dir. Build with :meth:`open`; the constructor does no I/O."""

    def __init__(self, path: str, defaults: LogConfig, clock: Clock, lock_fd: int,
                 partitions: dict[PartitionKey, PartitionLog], recovered: bool):
        self._path = path
        self._defaults = defaults
        self._clock = clock
        self._lock_fd: int | None = lock_fd
        self.partitions = partitions
        self._recovered = recovered

    @classmethod
    def open(cls, path: str, defaults: LogConfig, clock: Clock = wall_clock_ms) -> LogDir:
        """Lock ``path`` (creating it if missing) and open every partition in it.

        Without a clean-shutdown marker every partition is recovered (scanned
        and cut at its first invalid entry). Raises StorageError, with a
        one-line message, for a dir that cannot be used or is locked.
        """
        with storage_errors(f"log dir {path} is unusable"):
            os.makedirs(path, exist_ok=True)
        lock_fd = _take_lock(path)
        partitions: dict[PartitionKey, PartitionLog] = {}
        try:
            with storage_errors(f"log dir {path} is unusable"):
                marker = os.path.join(path, CLEAN_SHUTDOWN_FILE)
                clean = os.path.exists(marker)
                for name in sorted(os.listdir(path)):
                    full = os.path.join(path, name)
                    if _DELETED_DIR.fullmatch(name) and os.path.isdir(full):
                        shutil.rmtree(full)
                        continue
                    if parse_partition_dirname(name) is None or not os.path.isdir(full):
                        continue
                    if not os.path.exists(os.path.join(full, PARTITION_FILE)):
                        _remove_unfinished(full)
                        continue
                    partition = PartitionLog.open(full, defaults, clock, recover=not clean)
                    partitions[(partition.topic, partition.partition)] = partition
                if clean:
                    os.unlink(marker)
                fsync_dir(path)
        except BaseException:
            for partition in partitions.values():
                partition.close()
            os.close(lock_fd)
            raise
        return cls(path, defaults, clock, lock_fd, partitions, recovered=not clean)

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

        ``clean``: flush everything first and then write the clean-shutdown
        marker, so the next open skips recovery. A writer whose disk failed
        closes with ``clean=False``: no flush, no marker, and the next open
        recovers. If a partition cannot be flushed the marker is not written.
        Closing twice does nothing.
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
