"""Leaders' host names, resolved off ``hb-replica``'s selector loop.

A leader's advertised host may be a name, and resolving one blocks
(``getaddrinfo``: seconds on a slow or dead DNS server); in the loop that
would stall every leader link and the worker's heartbeat. A
:class:`Resolver` hands names to one daemon thread of its own through a
bounded queue and keeps the answers; the loop calls :meth:`Resolver.lookup`
whenever a link would connect, which never blocks: a numeric address is
answered at once, a name once its answer is in (None until then: ask again
shortly). Answers are kept ``TTL_S``, failures ``FAILED_TTL_S``; at most
``QUEUE_MAX`` names wait at a time (more are asked again later) and at most
``KEPT_MAX`` answers are kept.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable

QUEUE_MAX = 64
KEPT_MAX = 4096
TTL_S = 60.0
FAILED_TTL_S = 5.0

Found = tuple[int, tuple]  # (address family, socket address)


class Resolver:
    def __init__(self, getaddrinfo: Callable = socket.getaddrinfo,
                 clock: Callable[[], float] = time.monotonic):
        self._getaddrinfo = getaddrinfo  # injected by tests: a slow name server
        self._clock = clock
        self._queue: queue.Queue = queue.Queue(QUEUE_MAX)
        self._lock = threading.Lock()
        self._answers: dict[tuple[str, int], tuple[float, Found | str]] = {}
        self._pending: set[tuple[str, int]] = set()
        self._thread: threading.Thread | None = None

    def lookup(self, host: str, port: int) -> Found | str | None:
        """``(family, sockaddr)`` to connect to, a one-line reason it cannot be
        resolved, or None while the answer is not in yet. Never blocks."""
        try:
            return _first(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                             flags=socket.AI_NUMERICHOST))
        except (OSError, UnicodeError, ValueError):
            pass  # not a numeric address: a name
        key = (host, port)
        now = self._clock()
        with self._lock:
            kept = self._answers.get(key)
            if kept is not None and kept[0] > now:
                return kept[1]
            if key in self._pending:
                return None
            try:
                self._queue.put_nowait(key)
            except queue.Full:
                return None
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hb-replica-resolver",
                                                daemon=True)
                self._thread.start()
        return None

    def _run(self) -> None:
        while True:
            host, port = self._queue.get()
            try:
                found: Found | str = _first(self._getaddrinfo(host, port,
                                                              type=socket.SOCK_STREAM))
                ttl = TTL_S
            except (OSError, UnicodeError, ValueError, IndexError) as e:
                found, ttl = f"cannot resolve {host[:200]!r}: {e}", FAILED_TTL_S
            with self._lock:
                if len(self._answers) >= KEPT_MAX:
                    self._answers.clear()
                self._answers[(host, port)] = (self._clock() + ttl, found)
                self._pending.discard((host, port))


def _first(infos) -> Found:
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


_shared: Resolver | None = None


def shared() -> Resolver:
    """The process's resolver (its thread starts on the first name asked)."""
    global _shared
    if _shared is None:
        _shared = Resolver()
    return _shared
