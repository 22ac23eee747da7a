"""The log dirs' state file: written to every online log dir at once, read at start.

Part of ``hb-logdirs``. :class:`StateWriters` keeps one thread per log dir;
:meth:`StateWriters.write_bytes` hands the encoded document to the thread of
every dir the document names online, and waits for them together, at most
``logdirs.state.write.timeout.ms``. Each thread replaces
``<log dir>/log-dirs-state`` with ``files.write_file_atomically`` (a
temporary file created exclusively, fsync, rename, fsync of the dir), so a
crash leaves the old copy or the new one. A dir whose write fails or is
still running at the deadline is not in the answer; :meth:`StateWriters.late`
tells the two apart (hb-logdirs takes a failed dir out of ``live`` at once, a
late one only once it has been late for ``logdirs.state.write.fail.ms``). A thread still stuck in
a write (a hung disk) is given nothing more until that write returns, so a
stuck dir costs the loop one timeout, never a thread per write.

:func:`read_copies` reads the copy of each dir as hostile input (no link
followed, a regular file of at most ``logdirs.state.max.bytes``, decoded by the
pure ``replication/localstate.py``), each in a thread of its own and all within
a bound (a hung disk's copy counts as unreadable, its thread left behind), and
says, per dir, why a copy is not there: hb-logdirs' start.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from hostbroker.errors import HostbrokerError
from hostbroker.log import files
from hostbroker.replication.localstate import STATE_FILE


class _Job:
    __slots__ = ("data", "done", "ok", "error")

    def __init__(self, data: bytes):
        self.data = data
        self.done = threading.Event()
        self.ok = False
        self.error = ""


class _DirWriter:
    """The thread that writes the state file of one log dir."""

    def __init__(self, dir_id: int, path: str, write: Callable[[str, bytes], None]):
        self.dir_id = dir_id
        self.path = path
        self._write = write
        self._cond = threading.Condition()
        self._job: _Job | None = None
        self._busy = False
        self._closed = False
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name=f"state-{dir_id}", daemon=True)
        self._thread.start()

    def submit(self, data: bytes) -> _Job | None:
        """Queue ``data``; None while the previous write has not returned."""
        with self._cond:
            if self._busy or self._job is not None or self._closed:
                return None
            job = self._job = _Job(data)
            self._cond.notify()
            return job

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                job, self._job, self._busy = self._job, None, True
                path = os.path.join(self.path, STATE_FILE)
            try:
                self._write(path, job.data)
                job.ok = True
            except (OSError, HostbrokerError) as e:
                job.error = files.describe(e) if isinstance(e, OSError) else str(e)
            finally:
                with self._cond:
                    self._busy = False
                    self.last_error = job.error
                job.done.set()


class StateWriters:
    """One writer thread per log dir (see the module docstring). ``timeout_s`` bounds
    a whole :meth:`write_bytes`; ``write`` is ``files.write_file_atomically`` (tests
    give a slow or failing one: a hung disk cannot be made for real)."""

    def __init__(self, timeout_s: float,
                 write: Callable[[str, bytes], None] = files.write_file_atomically,
                 clock: Callable[[], float] = time.monotonic):
        self.timeout_s = timeout_s
        self._write = write
        self._clock = clock
        self._dirs: dict[int, _DirWriter] = {}

    def set_dir(self, dir_id: int, path: str) -> None:
        """Write dir ``dir_id``'s copy at ``path`` from now on (a dir given an id, or
        found at another path)."""
        writer = self._dirs.get(dir_id)
        if writer is None:
            self._dirs[dir_id] = _DirWriter(dir_id, path, self._write)
        else:
            with writer._cond:
                writer.path = path

    def late(self, dir_id: int) -> bool:
        """Whether dir ``dir_id``'s last write is still running (it timed out, or
        it was not even tried because the one before had not returned)."""
        writer = self._dirs.get(dir_id)
        if writer is None:
            return False
        with writer._cond:
            return writer._busy or writer._job is not None

    def error_of(self, dir_id: int) -> str:
        """Why the last write to dir ``dir_id`` failed ("" when it did not)."""
        writer = self._dirs.get(dir_id)
        return writer.last_error if writer is not None else "no such log dir"

    def write_bytes(self, data: bytes, ids: Iterable[int]) -> set[int]:
        """Write ``data`` as the state file of each dir of ``ids`` in parallel; the
        ids whose write returned without error within ``timeout_s``. An id this
        object has no dir for, or whose previous write still runs, is not written."""
        jobs = {}
        for dir_id in ids:
            writer = self._dirs.get(dir_id)
            job = writer.submit(data) if writer is not None else None
            if job is not None:
                jobs[dir_id] = job
        deadline = self._clock() + self.timeout_s
        written = set()
        for dir_id, job in jobs.items():
            if job.done.wait(max(0.0, deadline - self._clock())) and job.ok:
                written.add(dir_id)
        return written

    def close(self) -> None:
        for writer in self._dirs.values():
            writer.close()


def read_copy(path: str, limits=None) -> tuple[object | None, str, bool]:
    """The state file copy of the log dir ``path``: ``(copy or None, why not ("":
    absent), looked)``, read under ``limits`` (a ``StateLimits``; None: the
    settings' defaults). ``looked`` is False only when the file could not be read
    (an I/O error). Whatever the reason, a dir without a copy may have held a
    newer one than the others: hb-logdirs counts it as not present."""
    from hostbroker.replication.localstate import DEFAULT_LIMITS, decode_state

    limits = limits or DEFAULT_LIMITS
    name = os.path.join(path, STATE_FILE)
    try:
        data = files.read_file(name, limits.max_bytes)
    except FileNotFoundError:
        return None, "", True
    except (IsADirectoryError, files.NotAFileError) as e:
        return None, f"{name}: {files.describe(e)}", True
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link in its place: not ours, not followed
            return None, f"{name}: {files.describe(e)}", True
        return None, f"{name}: {files.describe(e)}", False
    if len(data) > limits.max_bytes:
        return None, f"{name}: longer than logdirs.state.max.bytes {limits.max_bytes}", True
    try:
        return decode_state(data, name, limits), "", True
    except (HostbrokerError, ValueError) as e:  # (the decoder's refusals)
        return None, str(e), True


def read_copies(dirs: Mapping[int, str], limits=None, *, timeout_s: float | None = None
                ) -> tuple[dict[int, object], dict[int, str]]:
    """The state file copy of each dir of ``dirs`` (key -> path), decoded, and
    for each dir without a usable copy one line saying why ("" when the file is
    absent, which is not damage: a dir that never held one). Each dir is read by
    a thread of its own; with ``timeout_s``, one not read by then is given up
    (a hung disk: its thread stays blocked, a daemon)."""
    read: dict[int, tuple] = {}
    threads = []
    for key, path in dirs.items():
        def look(key=key, path=path):
            read[key] = read_copy(path, limits)

        thread = threading.Thread(target=look, name=f"state-read-{key}", daemon=True)
        thread.start()
        threads.append(thread)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    read = dict(read)  # (a thread given up on may still store its answer: not seen)
    copies: dict[int, object] = {}
    missing: dict[int, str] = {}
    for key, path in dirs.items():
        copy, why, _ = read.get(key) or (
            None, f"{os.path.join(path, STATE_FILE)}: not read within {timeout_s:g} s "
                  "(a hung disk?)", False)
        if copy is not None:
            copies[key] = copy
        else:
            missing[key] = why
    return copies, missing
