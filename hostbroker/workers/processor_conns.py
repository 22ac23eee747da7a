"""How a processor keeps its connections (a part of :mod:`hostbroker.workers.processor`).

Owns: taking connections from the acceptor and acknowledging them; what
epoll watches each socket for (``Connection.watched``), and the waiting
for events; closing connections, and expiring stalled and idle ones; and
*lingering* after an error frame (the processor module's docstring says
why). Read interest is dropped lazily: a connection that may not read
keeps its socket registered until it turns readable, so a client waiting
for an answer (a PUT's, say) costs no ``epoll_ctl`` twice a request.

:class:`Connections` is a mixin of
:class:`~hostbroker.workers.processor.ProcessorWorker` and uses its
connections, buffers, rings and counters.
"""

from __future__ import annotations

import math
import os
import select
import socket
import struct
import time

from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.connection import RECV_CHUNK, Connection

_ACK = struct.Struct("<I")  # hand-offs taken, processor -> acceptor
# what a connection is watched for (Connection.watched), and the epoll masks of it
WATCH_READ, WATCH_WRITE = 1, 2
_EPOLL_MASKS = {WATCH_READ: select.EPOLLIN, WATCH_WRITE: select.EPOLLOUT,
                WATCH_READ | WATCH_WRITE: select.EPOLLIN | select.EPOLLOUT}
# events that make a watched socket readable / writable (selectors' rule:
# anything but EPOLLOUT reads, anything but EPOLLIN writes)
READABLE = ~select.EPOLLOUT
WRITABLE = ~select.EPOLLIN


class Connections:
    """The connections of a processor; see the module doc."""

    def _events(self, timeout: float | None) -> list[tuple[int, int]]:
        """``(fd, epoll mask)`` of what is ready, waiting up to ``timeout``
        seconds (None: for ever), rounded up to the millisecond as selectors does."""
        if timeout is None:
            timeout = -1
        elif timeout > 0:
            timeout = math.ceil(timeout * 1e3) * 1e-3
        else:
            timeout = 0
        try:
            return self.epoll.poll(timeout, len(self.by_fd) + 2)
        except InterruptedError:
            return []

    # -- connections -------------------------------------------------------
    def _accept_handoffs(self) -> None:
        while True:
            try:
                _, fds, flags, _ = socket.recv_fds(self.handoff, 1, 1)
            except (BlockingIOError, InterruptedError):
                break
            if not fds and not flags:
                break
            # one connection per message, whether or not its fd made it
            self.acks_owed += 1
            if flags & getattr(socket, "MSG_CTRUNC", 8):
                for fd in fds:
                    os.close(fd)
                continue
            for fd in fds:
                self._adopt(fd)
        self._send_acks()

    def _send_acks(self) -> None:
        """Tell the acceptor how many hand-offs were taken (after CONNECTIONS
        counts them, so it never sees a connection in neither place)."""
        if not self.acks_owed:
            return
        try:
            self.handoff.send(_ACK.pack(self.acks_owed))
            self.acks_owed = 0
        except (BlockingIOError, InterruptedError):
            pass  # the acceptor is behind: the next loop tries again
        except OSError:
            self.acks_owed = 0  # no acceptor to tell

    def _adopt(self, fd: int) -> None:
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.stopping:
            sock.close()
            return
        self.counter = (self.counter + 1) & 0xFFFFFFFF
        conn_id = (self.index << 56) | ((self.epoch & 0xFFFFFF) << 32) | self.counter
        conn = Connection(sock, conn_id, self.plan.handler_for(conn_id), time.monotonic())
        self.conns[conn_id] = conn
        self.by_fd[conn.fd] = conn
        self.epoll.register(conn.fd, select.EPOLLIN)
        conn.watched = WATCH_READ
        self.board.set(self.slot, procs.CONNECTIONS, len(self.conns))
        self._adopt_tls(conn)  # an ssl:// one: its handshake (workers/tls.py)
        if conn.tls is None and conn.conn_id in self.conns:
            self._identify_peer(conn)  # (processor_access; TLS: after its handshake)

    def _close(self, conn: Connection) -> None:
        if self.by_fd.pop(conn.fd, None) is None:
            return
        self.conns.pop(conn.conn_id, None)
        if conn.watched:
            try:
                self.epoll.unregister(conn.fd)
            except OSError:
                pass
            conn.watched = 0
        conn.sock.close()
        if conn.tls is not None:
            self._tls_closed(conn)
        self._drop_claim(conn)
        self._unpark(conn.conn_id)  # a FETCH waiting here (processor_fetch)
        if conn.at_writer:  # its PUT's answer, if it comes, finds no connection
            conn.at_writer = 0
            self.puts_out -= 1
        conn.release(self.buffers)
        self.requests[conn.handler].send(
            env.REQ_HEADER.pack(conn.conn_id, 0, env.REQ_CLOSED, time.monotonic_ns()))
        self.dirty_handlers.add(conn.handler)
        self.board.set(self.slot, procs.CONNECTIONS, len(self.conns))

    def _expire(self) -> None:
        """Close connections stalled in the middle of a frame, and idle ones."""
        now = self.now
        for conn in list(self.conns.values()):
            if conn.lingering:
                continue  # _end_lingers
            if conn.tls is not None and self._tls_expired(conn):
                continue  # handshaking: its own deadline
            if (conn.reading and (conn.end or conn.claim is not None)
                    and now - conn.frame_started > self.read_timeout):
                self.count(procs.ERRORS)
                self._close(conn)
            elif (not conn.at_handler and not conn.at_writer
                  and conn.conn_id not in self.parked  # a FETCH waiting here (processor_fetch)
                  and now - conn.active > self.idle_timeout):
                self._close(conn)
        self.buffers.trim()

    # -- ending after an error frame --------------------------------------------
    def _linger(self, conn: Connection) -> None:
        """Everything before the close is written: EOF to the client, then read
        and drop what it still sends (bounded) before closing (module docstring)."""
        if self.linger_s <= 0 or self.linger_bytes <= 0:
            self._close(conn)
            return
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        self._drop_claim(conn)
        conn.linger(self.now + self.linger_s, self.linger_bytes, self.buffers)
        self._apply_interest(conn)
        self.lingering.append(conn)

    def _drop_input(self, conn: Connection) -> None:
        try:
            n = conn.sock.recv_into(self.recv_view, min(RECV_CHUNK, conn.linger_left))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        self.count(procs.BYTES_IN, n)
        conn.linger_left -= n
        if n == 0 or conn.linger_left <= 0:
            self._close(conn)

    def _end_lingers(self) -> None:
        """Close lingering connections whose time is up (deadlines come in order)."""
        lingering = self.lingering
        while lingering:
            conn = lingering[0]
            live = self.conns.get(conn.conn_id) is conn  # its fd may be another's by now
            if live and conn.linger_until > self.now:
                break
            lingering.popleft()
            if live:
                self._close(conn)

    # -- interest bookkeeping --------------------------------------------------
    def _set_reading(self, conn: Connection, reading: bool) -> None:
        if conn.lingering:
            return
        if conn.closing:
            reading = False
        if reading != conn.reading:
            conn.reading = reading
            if reading and (conn.end or conn.claim is not None):
                conn.frame_started = self.now  # the deadline runs while we read
            self._apply_interest(conn)
            if reading and conn.tls is not None:
                self._tls_reading_on(conn)  # plaintext epoll cannot see (workers/tls.py)

    def _apply_interest(self, conn: Connection, lazy: bool = True) -> None:
        """Have epoll watch ``conn`` for what it reads and writes now.

        Read interest is dropped ``lazy``-ly: it stays registered until the
        socket is readable while the connection may not read (``_read`` then
        drops it for real). A client that waits for each answer sends nothing
        while it waits (for its PUT at a writer, say), so no ``epoll_ctl``
        goes by twice a request; one that does send wakes the loop once."""
        if conn.fd not in self.by_fd:
            return
        events = (WATCH_READ if conn.reading else 0) | (WATCH_WRITE if conn.writing else 0)
        watched = conn.watched
        if watched == events or (lazy and watched == events | WATCH_READ and not conn.lingering):
            return
        if events == 0:
            self.epoll.unregister(conn.fd)
        elif not watched:
            self.epoll.register(conn.fd, _EPOLL_MASKS[events])
        else:
            self.epoll.modify(conn.fd, _EPOLL_MASKS[events])
        conn.watched = events
