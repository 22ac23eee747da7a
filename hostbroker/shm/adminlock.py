"""The broker's admin lock: a cross-process mutex that the kernel releases
when its holder dies.

Owns: :class:`AdminLock`, taken for the rare changes several processes may
attempt at once (claiming and freeing slots of the tables in
:mod:`hostbroker.shm.table`, flagging a log dir offline), and the System V
key a broker's lock is found by.
"""

from __future__ import annotations

import time
import zlib

import sysv_ipc


class AdminLock:
    """A cross-process mutex that the kernel releases when its holder dies.

    A System V semaphore (value 1 = free) whose operations use ``SEM_UNDO``:
    the kernel reverts a dead process's adjustments, so a holder killed by
    SIGKILL does not keep the lock. Used for the rare changes that several
    processes may attempt at once (claiming and freeing table slots), never
    on a hot path.

    Not reentrant. Do not fork while holding it: the child inherits no undo
    adjustment, so only the parent's death releases it. This build of
    sysv_ipc has no ``semtimedop``, so a timed acquire polls with backoff.
    """

    def __init__(self, semaphore: sysv_ipc.Semaphore, timeout: float | None):
        semaphore.undo = True
        self._sem = semaphore
        self.timeout = timeout
        self._held = False

    @staticmethod
    def token_key(token: str) -> int:
        """The System V key of a broker's lock, derived from its shm token.

        A key that a restart can compute again is what lets it remove the
        semaphore of a crashed run (:meth:`remove_stale`).
        """
        return zlib.crc32(f"hostbroker-admin-lock:{token}".encode()) & 0x7FFF_FFFF or 1

    @classmethod
    def create(cls, key: int | str | None = None, timeout: float | None = 10.0) -> AdminLock:
        """A new free lock (owner side); raises FileExistsError if the key is taken.

        ``key`` is a System V key, a broker token (see :meth:`token_key`), or
        None to pick an unused key: read :attr:`key` and pass it to the
        processes that :meth:`attach`.
        """
        if isinstance(key, str):
            key = cls.token_key(key)
        try:
            semaphore = sysv_ipc.Semaphore(key, sysv_ipc.IPC_CREX, mode=0o600, initial_value=1)
        except sysv_ipc.ExistentialError:
            raise FileExistsError(f"a semaphore with key {key} exists") from None
        return cls(semaphore, timeout)

    @classmethod
    def attach(cls, key: int | str, timeout: float | None = 10.0) -> AdminLock:
        if isinstance(key, str):
            key = cls.token_key(key)
        try:
            return cls(sysv_ipc.Semaphore(key), timeout)
        except sysv_ipc.ExistentialError:
            raise FileNotFoundError(f"no semaphore with key {key}") from None
        except sysv_ipc.PermissionsError:
            raise PermissionError(f"the semaphore with key {key} is not ours") from None

    @classmethod
    def remove_stale(cls, key: int | str) -> bool:
        """Remove the lock left by a crashed run, if any; True if there was one.

        System V semaphores outlive their processes, like /dev/shm regions.
        """
        try:
            cls.attach(key).remove()
        except FileNotFoundError:
            return False
        return True

    @property
    def key(self) -> int:
        return self._sem.key

    def acquire(self, timeout: float | None = None) -> None:
        """Take the lock, waiting up to ``timeout`` seconds (default: the lock's).

        Raises TimeoutError naming the last process that changed it.
        """
        timeout = self.timeout if timeout is None else timeout
        if timeout is None:
            self._sem.block = True
            self._sem.acquire()
        else:
            self._acquire_polling(time.monotonic() + timeout)
        self._held = True

    def _acquire_polling(self, deadline: float) -> None:
        self._sem.block = False
        pause = 0.0005
        while True:
            try:
                self._sem.acquire()
                return
            except sysv_ipc.BusyError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"admin lock {self.key} held (last taken by pid {self._sem.last_pid})") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def release(self) -> None:
        if not self._held:
            raise RuntimeError("releasing an admin lock this process does not hold")
        self._held = False
        self._sem.release()

    def __enter__(self) -> AdminLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def remove(self) -> None:
        """Destroy the semaphore (owner, at shutdown)."""
        try:
            self._sem.remove()
        except sysv_ipc.ExistentialError:
            pass
        except sysv_ipc.PermissionsError:
            raise PermissionError(f"the semaphore with key {self.key} is not ours") from None
