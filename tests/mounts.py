"""Real small filesystems for tests: a tmpfs mounted on a test's own dir, so a
broker can be driven into a real ENOSPC, or have a log dir pulled from under
it (``umount -l``). Only root can mount; the tests that use this run as root,
as CI does.

Every mount made here is unmounted by the same context manager that made it,
lazily (``umount -l``), so that files a killed broker still holds open do not
keep the mount busy; a mount that a test already removed is left alone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


def mounted(path: str) -> bool:
    """True while a filesystem is mounted exactly on ``path``."""
    target = os.path.realpath(path)
    with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            # /proc/self/mounts escapes a space in a path as \040
            if len(fields) > 1 and fields[1].replace("\\040", " ") == target:
                return True
    return False


def mount_tmpfs(path: str, size: str) -> None:
    """Mount a tmpfs of ``size`` (``"4m"``, ``"2m"``: tmpfs's own units) on
    ``path``, made first if it is not there. Mode 0750: a fresh tmpfs is 1777,
    which a root broker refuses as a log dir."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0750", "tmpfs", path],
                   check=True, capture_output=True, timeout=30)


def unmount(path: str) -> None:
    """``umount -l`` of ``path`` if something is mounted there (a test may
    have pulled it already)."""
    if mounted(path):
        subprocess.run(["umount", "-l", path], check=False, capture_output=True, timeout=30)


@contextlib.contextmanager
def tmpfs(path: str, size: str = "2m") -> Iterator[str]:
    """A tmpfs of ``size`` on ``path`` for the block; unmounted on leaving it,
    whatever happened inside."""
    path = str(path)
    mount_tmpfs(path, size)
    try:
        yield path
    finally:
        unmount(path)


def fill(path: str, name: str = "filler") -> str:
    """Take every free byte of the filesystem holding ``path`` with one file
    (``fallocate``, then plain writes for what it left), so that the next
    write there fails with ENOSPC. Returns the file's path: removing it frees
    the space again."""
    filler = os.path.join(path, name)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
        with contextlib.suppress(OSError):
            if free > 0:
                os.posix_fallocate(fd, 0, free)
        os.lseek(fd, 0, os.SEEK_END)
        block = b"\0" * 4096
        while True:
            try:
                if os.write(fd, block) == 0:
                    break
            except OSError:
                break
    finally:
        os.close(fd)
    return filler
