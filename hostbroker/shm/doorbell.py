"""Wake-ups between processes: a Linux eventfd per sleeping process.

Owns: telling a process "something arrived in one of your rings" (or "space
freed in a ring you wait on"). It carries no data; the rings do.

Why an eventfd: a processor must wait on its sockets and its rings at once,
and only file descriptors can go into one ``selectors`` loop. Semaphores
(POSIX or System V) cannot be selected on, and a pipe costs two descriptors
and can fill up. An eventfd is one descriptor holding a 64-bit counter:
``ring`` adds 1, ``drain`` reads and zeroes it, and it is readable while
non-zero. Rings that happen before the sleeper looks are not lost, and many
rings before a drain collapse into one wake-up.

Ownership: the supervisor creates one doorbell per worker process before
forking, so every child inherits every descriptor (the descriptor is
inheritable, not close-on-exec, for children that exec as well). Each producer
into a worker's rings rings that worker's doorbell after publishing a batch;
the worker selects on its own doorbell and drains it before reading its
rings, so a ring that lands while it reads wakes it again.
"""

from __future__ import annotations

import math
import os
import select


class Doorbell:
    """One eventfd; non-blocking on both ends."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int | None = None):
        """A new eventfd, or a handle on an inherited one (``fd``)."""
        if fd is None:
            fd = os.eventfd(0, os.EFD_NONBLOCK)
            os.set_inheritable(fd, True)
        self._fd = fd

    def ring(self) -> None:
        """Wake the owner. Never blocks."""
        try:
            os.eventfd_write(self._fd, 1)
        except BlockingIOError:
            pass  # the counter is at its maximum: the owner is already due to wake

    def drain(self) -> int:
        """Take the pending wake-ups; returns how many rings there were (0 if none)."""
        try:
            return os.eventfd_read(self._fd)
        except BlockingIOError:
            return 0

    def wait(self, timeout: float | None) -> bool:
        """Sleep until rung or ``timeout`` seconds pass; True if rung.

        For a process with nothing but rings to wait on. Does not drain.
        """
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))))

    def fileno(self) -> int:
        """The descriptor, for ``selectors``; readable while rung."""
        return self._fd

    def close(self) -> None:
        """Close this process's descriptor. Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __repr__(self) -> str:
        return f"<Doorbell fd={self._fd}>"
