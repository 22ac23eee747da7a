"""File-system steps the log's owners share: safe opens, durable renames, atomic
writes, state files that may hold anything, moving deleted dirs to the trash,
errors.

Used by the writer's log code (``partition.py``, ``logdir.py``,
``recovery.py``), the offsets store and the supervisor's broker lock. No
sockets, no processes.

Every file the broker opens in a log dir is opened here, and none through a
symbolic link: the last component is opened with ``O_NOFOLLOW`` (a link there
is refused with ELOOP, named in one line as a symbolic link), and anything
but a regular file is refused after ``fstat`` (a FIFO is opened
``O_NONBLOCK``, so it cannot hang the opener). A temporary file is created
``O_EXCL`` after a stale one (whatever it is: file, link, directory) has
been removed, so nobody's planted file is written through. Files are created
with mode 0o666 and directories 0o777: the process umask (``log.umask``, set
by the supervisor before anything is created) decides what others may read.

The other path components are not walked with directory descriptors: the
supervisor refuses, as root, a log dir that anyone but root may write, or
that lies under such a directory (``check_log_dir_owner``), and every dir the
broker creates below it is its own; so no component can be swapped by
someone else once the broker has checked it. A link found where a partition
dir, a segment or a state file should be is treated as damage (see
``logdir.py`` and ``partition.py``), never followed.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import shutil
import stat
from collections.abc import Iterator

from hostbroker.errors import StorageError

log = logging.getLogger(__name__)

FILE_MODE = 0o666  # the umask takes away what others may not do
DIR_MODE = 0o777
TMP_SUFFIX = ".tmp"

_trash_names = itertools.count()


class NotAFileError(OSError):
    """What should be a regular file is something else (a link, a directory, a FIFO)."""


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Turn an OSError in the block into a one-line StorageError about ``what``."""
    try:
        yield
    except OSError as exc:
        raise StorageError(f"{what}: {describe(exc)}") from exc


def describe(exc: OSError) -> str:
    """The one-line reason of an OSError, saying "is a symbolic link" for ELOOP."""
    if exc.errno == errno.ELOOP:
        return "is a symbolic link (not followed)"
    return exc.strerror or str(exc)


def kind_of(mode: int) -> str:
    """What a file of ``mode`` (from lstat) is, in a word or two."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a device or special file"


def open_file(path: str, flags: int, mode: int = FILE_MODE) -> int:
    """``os.open`` of a regular file without following a link at ``path``.

    Raises OSError (ELOOP for a link, NotAFileError for a directory, FIFO,
    device or socket) and whatever ``os.open`` raises.
    """
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(info.st_mode):
            raise NotAFileError(errno.EINVAL, f"is {kind_of(info.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(path: str, limit: int) -> bytes:
    """The content of the regular file ``path``, at most ``limit`` + 1 bytes (so a
    caller sees that it is longer). Raises as :func:`open_file`."""
    fd = open_file(path, os.O_RDONLY)
    try:
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def remove_any(path: str) -> bool:
    """Remove what is at ``path``: a file, a link (not its target) or a whole
    directory; False when there was nothing. Raises OSError."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)  # never follows a link inside it
    else:
        os.unlink(path)
    return True


def clear_for_file(path: str, what: str) -> None:
    """Make way for a regular file at ``path``: anything else there (a directory,
    a link, a FIFO) is removed, with one log line. Raises OSError."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode):
        return
    log.warning("%s: %s is %s, not a regular file; removed", path, what, kind_of(info.st_mode))
    remove_any(path)


def create_exclusive(path: str, flags: int = os.O_WRONLY) -> int:
    """Create ``path`` anew (``O_EXCL``), after removing whatever was there."""
    remove_any(path)
    return open_file(path, flags | os.O_CREAT | os.O_EXCL)


def open_lock_file(path: str, what: str) -> int:
    """Open (creating if missing) the lock file ``path``, O_RDWR, never through a
    link: anything at ``path`` that is not a regular file is removed first, with
    one log line (a lock file holds no state). Raises OSError."""
    for attempt in (1, 2):  # a second time: something was planted between check and open
        clear_for_file(path, what)
        try:
            return open_file(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if attempt == 2 or (exc.errno != errno.ELOOP and not isinstance(exc, NotAFileError)):
                raise
    raise AssertionError("unreachable")


def fsync_dir(path: str) -> None:
    """Make the directory entries of ``path`` (creations, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file.

    The temporary file ``<path>.tmp`` is created exclusively after removing
    any stale one, and the rename replaces a link or a directory at ``path``
    (the latter removed first, with one log line), never what a link points to.
    """
    tmp = path + TMP_SUFFIX
    fd = create_exclusive(tmp)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            clear_for_file(path, os.path.basename(path))
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")


def sync_file(path: str) -> None:
    """fdatasync the file at ``path`` (its pages may have been written by a dead process)."""
    fd = open_file(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def move_to_trash(path: str, trash: str, now_ms: int) -> None:
    """Rename ``path`` into the directory ``trash`` (created if missing), then remove it.

    Raises StorageError naming ``path`` if it cannot be moved; one that is
    moved but cannot be removed stays in ``trash`` (removed at the next open
    of the log dir) and is only logged.
    """
    with storage_errors(f"cannot delete {path}"):
        if os.path.islink(trash) or os.path.lexists(trash) and not os.path.isdir(trash):
            os.unlink(trash)  # never moved into through a link
        os.makedirs(trash, exist_ok=True)
        doomed = os.path.join(trash, f"{now_ms}-{os.getpid()}-{next(_trash_names)}")
        os.rename(path, doomed)
        fsync_dir(os.path.dirname(path) or ".")
    remove_tree(doomed)


def remove_tree(path: str) -> bool:
    """Remove ``path`` (a dir and everything under it, or a file); log one line and
    return False if it cannot."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError as exc:
        log.warning("%s: cannot remove it yet (%s); it is left for the next start",
                    path, exc.strerror or exc)
        return False
    return True


def writable_by_others(path: str) -> str | None:
    """Why users other than this one (and root) could change what lies at ``path``,
    or None. Checked for a broker run as root, before anything is created:

    - the log dir itself must not be group- or other-writable, nor owned by
      another user;
    - each directory above it (of the path as given and as resolved, up to
      ``/``; for a log dir still to be created, from its nearest existing
      ancestor) must not be owned by another user, nor group- or
      other-writable unless it has the sticky bit (``/tmp``), which keeps
      others from renaming or removing what they do not own;
    - no component of the path as given may be a symbolic link owned by
      another user (who could point it elsewhere at any time).
    """
    euid = os.geteuid()
    target = os.path.abspath(path)
    chains = []
    for start in (target, os.path.realpath(target)):
        chain, probe = [], start
        while True:
            chain.append(probe)
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
        chains.append(chain)
    checked = set()
    for chain in chains:
        for directory in chain:
            try:
                link = os.lstat(directory)
                info = os.stat(directory)
            except FileNotFoundError:
                continue  # still to be created, by us
            if stat.S_ISLNK(link.st_mode) and link.st_uid not in (0, euid):
                # its owner may remove it and link it anywhere else, even in /tmp
                return f"{directory} is a symbolic link owned by uid {link.st_uid}"
            is_target = directory in (target, os.path.realpath(target))
            key = (directory, is_target)
            if key in checked:
                continue
            checked.add(key)
            if info.st_uid not in (0, euid):
                return f"{directory} is owned by uid {info.st_uid}"
            shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if shared and (is_target or not info.st_mode & stat.S_ISVTX):
                return (f"{directory} may be written by users other than its owner "
                        f"(mode {stat.S_IMODE(info.st_mode):04o})")
    return None
