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

Skipping the bell of an awake peer: an ``eventfd_write`` is a system call,
and the worker it is for is often awake and about to look at its rings
anyway. A :class:`Waker` rings a peer only if the peer's ``sleeping`` flag
on the process board is set. This is the Dekker handshake of the rings'
full-ring wait again, with the same fence on both sides::

    producer (Waker.wake)                   sleeper (Sleeper.sleep)
    publish the record (store head)         store sleeping = 1
    fence                                   fence
    load sleeping; if 1: ring the bell      load every input ring's head;
                                            sleep only if all are empty
                                            store sleeping = 0 after waking

Either the sleeper sees the record or the producer sees the flag, so a
record is never left unseen by a sleeping worker. Only wake-ups that mean
"a record is in your ring" may be skipped this way: a sleeper's look before
sleeping covers only what it checks (its input rings, and whatever its
``ready`` callback adds). Other wake-ups (space freed in a full ring, a stop,
a peer's restart) always ring.

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
import time

from hostbroker.shm.ring import full_fence


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


class Waker:
    """A peer's doorbell, rung only while the peer sleeps (see the module doc).

    ``flags`` and ``index`` locate the peer's sleeping flag (the process
    board's :attr:`~hostbroker.shm.procs.ProcessBoard.flags` and
    :meth:`~hostbroker.shm.procs.ProcessBoard.sleeping_index`). ``rung`` and
    ``skipped`` count what :meth:`wake` did, for the board's counters.
    """

    __slots__ = ("bell", "_flags", "_index", "rung", "skipped")

    def __init__(self, bell: Doorbell, flags, index: int):
        self.bell = bell
        self._flags = flags
        self._index = index
        self.rung = 0
        self.skipped = 0

    def wake(self, needed=None) -> None:
        """After publishing records into the peer's ring: ring if it sleeps
        (and, given ``needed``, a callable, only if ``needed()`` says the
        sleeper waits for this at all)."""
        full_fence()
        if self._flags[self._index] and (needed is None or needed()):
            self.bell.ring()
            self.rung += 1
        else:
            self.skipped += 1

    def ring(self) -> None:
        """Ring whatever the peer is doing (space freed, stop, restart)."""
        self.bell.ring()
        self.rung += 1

    def asleep(self) -> bool:
        """Whether the peer sleeps (or is about to) waiting for its doorbell."""
        return bool(self._flags[self._index])


class Sleeper:
    """The sleeping side: say so, look once more, then wait on the doorbell.

    ``ready()`` says whether work is already there (records in an input ring,
    or anything else that a skipped :meth:`Waker.wake` may have been about).
    ``spin_ns`` bounds a busy look before sleeping (0: never spin); it is
    used only when the caller says work is likely. Counts: ``wakeups``
    (sleeps ended by an event, not a timeout) and ``spin_hits``.
    """

    def __init__(self, flags, index: int, ready, spin_ns: int = 0):
        self._flags = flags
        self._index = index
        self._ready = ready
        self.spin_ns = spin_ns
        self.wakeups = 0
        self.spin_hits = 0

    def spin(self, poll=None, spin_ns: int | None = None) -> bool:
        """Look for work for up to ``spin_ns`` (default: the sleeper's); True
        if some came.

        ``poll`` (optional) is called each round as well and returns True when
        it found work (a processor polls its sockets this way)."""
        deadline = time.monotonic_ns() + (self.spin_ns if spin_ns is None else spin_ns)
        ready = self._ready
        while True:
            if ready() or (poll is not None and poll()):
                self.spin_hits += 1
                return True
            if time.monotonic_ns() >= deadline:
                return False

    def sleep(self, wait, timeout: float | None):
        """Flag, fence, look, then ``wait(timeout)`` (a selector's ``select``)
        unless work is there, in which case ``wait(0)``. Returns what ``wait``
        returned."""
        flags, index = self._flags, self._index
        flags[index] = 1
        full_fence()
        if timeout is None or timeout > 0:
            if self._ready():
                timeout = 0
        try:
            events = wait(timeout)
        finally:
            flags[index] = 0
        if events and timeout != 0:
            self.wakeups += 1
        return events
