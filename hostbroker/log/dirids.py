"""Log dir ids: the small stable integer that names a log dir (docs/storage.md,
"Replicas across log dirs").

A replica across log dirs is named by the id of the dir it is on, never by
the dir's place in ``log.dirs``, so dirs may be reordered or renamed in the
config. The id lives in the dir, in the file ``log-dir-id``: one line, a
decimal id from 1 to 2^31-1 and a newline, written atomically (temporary
file, fsync, rename, fsync of the dir; 0640 under the default ``log.umask``).

It is read as hostile input: opened without following a link, a regular file
of at most 32 bytes holding exactly that line (no sign, no leading zero, no
space). Anything else is a :class:`StorageError` naming the file and the
problem, and the dir then starts offline ("damage at start").

Who calls what: the supervisor's prepare gives every configured dir its id
with :func:`assign_dir_ids` before any fork (a dir without the file, a fresh
disk or one used before log dir ids existed, gets the next free id); the
writers' probe re-reads the id with :func:`read_dir_id` to see that their
dir was not replaced; hb-logdirs writes a new disk's id with
:func:`write_dir_id`. No sockets, no processes.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence

from hostbroker.errors import StorageError
from hostbroker.log.files import describe, read_file, storage_errors, write_file_atomically

log = logging.getLogger(__name__)

DIR_ID_FILE = "log-dir-id"
MIN_DIR_ID = 1
MAX_DIR_ID = 2**31 - 1
# "2147483647\n" is 11 bytes; a file over this is not an id file.
MAX_DIR_ID_FILE_BYTES = 32
_ID_LINE = re.compile(rb"[1-9][0-9]{0,9}\n")


class DuplicateDirIdError(StorageError):
    """Two configured log dirs hold the same id: the broker refuses to start."""


def dir_id_path(path: str) -> str:
    return os.path.join(path, DIR_ID_FILE)


def parse_dir_id(raw: bytes) -> int:
    """The id a ``log-dir-id`` file's bytes hold; ValueError saying what is wrong."""
    if len(raw) > MAX_DIR_ID_FILE_BYTES:
        raise ValueError(f"longer than {MAX_DIR_ID_FILE_BYTES} bytes")
    if not _ID_LINE.fullmatch(raw):
        raise ValueError(f"{bytes(raw[:MAX_DIR_ID_FILE_BYTES])!r} is not one line holding "
                         f"a decimal id from {MIN_DIR_ID} to {MAX_DIR_ID}")
    dir_id = int(raw)
    if dir_id > MAX_DIR_ID:
        raise ValueError(f"{dir_id} is over {MAX_DIR_ID}")
    return dir_id


def read_dir_id(path: str) -> int | None:
    """The id of the log dir ``path``, or None when it has no ``log-dir-id``.

    Raises StorageError naming the file for anything else: unreadable, a link,
    a directory or other non-file, longer than 32 bytes, or not the one line.
    """
    id_path = dir_id_path(path)
    try:
        raw = read_file(id_path, MAX_DIR_ID_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {id_path}: {describe(exc)}") from exc
    try:
        return parse_dir_id(raw)
    except ValueError as exc:
        raise StorageError(f"{id_path}: {exc}") from None


def write_dir_id(path: str, dir_id: int) -> None:
    """Write ``dir_id`` as the id of the log dir ``path``, atomically and durably.

    ValueError for an id out of range; StorageError when it cannot be written.
    """
    if type(dir_id) is not int or not MIN_DIR_ID <= dir_id <= MAX_DIR_ID:
        raise ValueError(f"log dir id {dir_id!r} is not {MIN_DIR_ID} to {MAX_DIR_ID}")
    id_path = dir_id_path(path)
    with storage_errors(f"cannot write {id_path}"):
        write_file_atomically(id_path, b"%d\n" % dir_id)


def duplicate_problem(log_dirs: Sequence[str], ids: Sequence[int | None]) -> str | None:
    """The one line refusing two dirs that hold the same id, or None."""
    seen: dict[int, str] = {}
    for path, dir_id in zip(log_dirs, ids):
        if dir_id is None:
            continue
        if dir_id in seen:
            return (f"log.dirs: {seen[dir_id]} and {path} both hold log dir id {dir_id} "
                    "(a copied dir?)")
        seen[dir_id] = path
    return None


def assign_dir_ids(log_dirs: Sequence[str], known: Iterable[int],
                   report: Callable[[str], None] | None = None) -> list[int | None]:
    """The id of each dir of ``log_dirs`` (in order), giving one to each dir
    that has none.

    A dir without the id file gets ``max(known ∪ found) + 1`` (then the next,
    in config order), where ``known`` are the ids the newest replication
    state names, so a fresh disk never takes a dead disk's id; its file is
    written before this returns. A dir whose id file is bad, or whose new id
    cannot be written, is None (it starts offline) and ``report`` (default:
    the log) gets one line saying why. Two dirs holding the same id raise
    :class:`DuplicateDirIdError` with the one line the broker refuses with.
    """
    say = report if report is not None else log.warning
    found: list[int | None] = []
    bad: set[int] = set()
    for i, path in enumerate(log_dirs):
        try:
            found.append(read_dir_id(path))
        except StorageError as e:
            say(f"log dir {path} starts offline: {e}")
            found.append(None)
            bad.add(i)
    problem = duplicate_problem(log_dirs, found)
    if problem:
        raise DuplicateDirIdError(problem)
    taken = {i for i in found if i is not None} | {int(k) for k in known}
    next_id = max(taken, default=0) + 1
    ids: list[int | None] = []
    for i, (path, dir_id) in enumerate(zip(log_dirs, found)):
        if dir_id is None and i not in bad:
            if next_id > MAX_DIR_ID:
                say(f"log dir {path} starts offline: no log dir id is left to give it")
            else:
                try:
                    write_dir_id(path, next_id)
                except StorageError as e:
                    say(f"log dir {path} starts offline: {e}")
                else:
                    dir_id = next_id
                    next_id += 1
        ids.append(dir_id)
    return ids
