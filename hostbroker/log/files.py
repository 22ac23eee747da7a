"""File-system steps the log's owners share: durable renames, atomic writes, errors.

Used by the writer's log code (``partition.py``, ``logdir.py``,
``recovery.py``) and the offsets store. No sockets, no processes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from hostbroker.errors import StorageError


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn an OSError in the block into a one-line StorageError about ``what``."""
    try:
        yield
    except OSError as exc:
        raise StorageError(f"{what}: {exc.strerror or exc}") from exc


def fsync_dir(path: str) -> None:
    """Make the directory entries of ``path`` (creations, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def sync_file(path: str) -> None:
    """fdatasync the file at ``path`` (its pages may have been written by a dead process)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
