"""The network processor process, ``hb-proc-N`` (``num.processors`` of them).

Owns: the client connections the acceptor hands it (over a SOCK_SEQPACKET
pair, one fd per message), each in one ``selectors`` loop; the open segment
files it sends from. Reads: whole request frames off its sockets, and answers
from every handler's response ring. Writes: frames into the request ring of
the connection's handler, and answers back to the sockets in the order the
requests came in (each request gets a sequence number; answers that arrive
early wait for the ones before them). A PRODUCE with acks=0 gets no number
and no answer. File parts of fetch answers go out with ``os.sendfile``.

Protocol rules enforced here, before anything is decoded: a size over
``socket.request.max.bytes`` is answered with a REQUEST_TOO_LARGE error frame
and the connection closes; a size too small to hold a correlation id closes
it with no answer. Both take their turn after earlier answers.

Backpressure: a connection with ``max.in.flight.requests.per.connection``
unanswered requests is not read until answers go out, and while a request
ring is full no socket is read at all. When a handler is replaced, the
connections waiting on it are closed (their requests died with it).
"""

from __future__ import annotations

import collections
import errno
import os
import selectors
import socket
import struct
import time

from hostbroker.protocol import api
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import Worker

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_RECV_CHUNK = 256 * 1024
_IDLE_TIMEOUT_S = 1.0
_FD_SWEEP_S = 5.0


class SegmentFiles:
    """Open segment files for sendfile, validated by inode so a path that was
    deleted and created again never serves the old file."""

    def __init__(self, limit: int):
        self.limit = limit
        self.files: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()

    def open(self, path: str) -> int:
        cached = self.files.get(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if cached is None:
                raise
            # deleted (retention) after the answer was computed: a reader that holds
            # the segment open finishes its read from it
            return cached[0]
        if cached is not None:
            if cached[1] == st.st_ino:
                self.files.move_to_end(path)
                return cached[0]
            os.close(cached[0])
            del self.files[path]
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.files[path] = (fd, st.st_ino)
        while len(self.files) > self.limit:
            _, (old, _) = self.files.popitem(last=False)
            os.close(old)
        return fd

    def sweep(self) -> None:
        """Close files that no longer exist (retention), so their space is freed."""
        for path, (fd, ino) in list(self.files.items()):
            try:
                if os.stat(path).st_ino == ino:
                    continue
            except FileNotFoundError:
                pass
            os.close(fd)
            del self.files[path]

    def close(self) -> None:
        for fd, _ in self.files.values():
            os.close(fd)
        self.files.clear()


class Connection:
    __slots__ = ("sock", "fd", "conn_id", "handler", "buf", "view", "start", "end",
                 "next_seq", "send_seq", "ready", "out", "out_pos", "closing", "reading",
                 "writing", "skip")

    def __init__(self, sock: socket.socket, conn_id: int, handler: int):
        self.sock = sock
        self.fd = sock.fileno()
        self.conn_id = conn_id
        self.handler = handler
        self.buf = bytearray(_RECV_CHUNK)
        self.view = memoryview(self.buf)
        self.start = 0
        self.end = 0
        self.next_seq = 0  # number given to the next request that expects an answer
        self.send_seq = 0  # number of the next answer to write
        self.ready: dict[int, tuple[list, int]] = {}
        self.out: collections.deque = collections.deque()
        self.out_pos = 0
        self.closing = False  # stop reading; close once queued answers are out
        self.reading = True
        self.writing = False
        self.skip = False

    @property
    def outstanding(self) -> int:
        return self.next_seq - self.send_seq


class ProcessorWorker(Worker):
    kind = "processor"
    process_name = "hb-proc"

    def init_process(self) -> None:
        super().init_process()
        plan = self.plan
        for i, (acceptor_end, processor_end) in enumerate(plan.handoff):
            acceptor_end.close()
            if i != self.index:
                processor_end.close()
        for _, listener in plan.listeners:
            listener.close()
        self.handoff = plan.handoff[self.index][1]
        self.handoff.setblocking(False)
        self.max_frame = self.config["socket.request.max.bytes"]
        self.max_in_flight = self.config["max.in.flight.requests.per.connection"]
        self.requests = [self.sender("req", self.index, h) for h in range(plan.num_handlers)]
        self.responses = [self.receiver("resp", h, self.index) for h in range(plan.num_handlers)]
        self.handler_bells = [plan.doorbell("handler", h) for h in range(plan.num_handlers)]
        self.handler_epochs = [self.board.epoch(plan.board_slot("handler", h))
                               for h in range(plan.num_handlers)]
        self.files = SegmentFiles(self.config["segment.fd.cache.size"])
        self.conns: dict[int, Connection] = {}
        self.by_fd: dict[int, Connection] = {}
        self.counter = 0
        self.paused = False
        self.dirty_handlers: set[int] = set()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.doorbell.fileno(), selectors.EVENT_READ, None)
        self.sel.register(self.handoff.fileno(), selectors.EVENT_READ, "handoff")
        self.board.set_state(self.slot, procs.WORKER_READY)

    # -- loop --------------------------------------------------------------
    def run(self) -> None:
        next_sweep = time.monotonic() + _FD_SWEEP_S
        drain_deadline = None
        while True:
            if self.stopping and drain_deadline is None:
                drain_deadline = self._start_drain()
            if drain_deadline is not None and (
                    not any(c.outstanding or c.out for c in self.conns.values())
                    or time.monotonic() > drain_deadline):
                break
            timeout = 0.005 if self.dirty_handlers else _IDLE_TIMEOUT_S
            for key, events in self.sel.select(timeout):
                data = key.data
                if data is None:
                    self.doorbell.drain()
                elif data == "handoff":
                    self._accept_handoffs()
                else:
                    conn = data
                    if events & selectors.EVENT_WRITE:
                        self._write(conn)
                    if events & selectors.EVENT_READ and conn.fd in self.by_fd:
                        self._read(conn)
            self.heartbeat()
            self._check_handler_epochs()
            self._take_answers()
            self._pump_requests()
            if time.monotonic() > next_sweep:
                self.files.sweep()
                next_sweep = time.monotonic() + _FD_SWEEP_S
        for conn in list(self.conns.values()):
            self._close(conn)
        self._pump_requests()
        self.files.close()

    def _start_drain(self) -> float:
        """Stop taking connections and requests; answer what is in flight."""
        try:
            self.sel.unregister(self.handoff.fileno())
        except KeyError:
            pass
        for conn in list(self.conns.values()):
            conn.closing = True
            if not conn.outstanding and not conn.out:
                self._close(conn)
            else:
                self._set_reading(conn, False)
        return time.monotonic() + self.config["shutdown.timeout.ms"] / 1000

    # -- connections -------------------------------------------------------
    def _accept_handoffs(self) -> None:
        while True:
            try:
                _, fds, flags, _ = socket.recv_fds(self.handoff, 1, 1)
            except (BlockingIOError, InterruptedError):
                return
            if flags & getattr(socket, "MSG_CTRUNC", 8):
                for fd in fds:
                    os.close(fd)
                continue
            if not fds:
                return
            for fd in fds:
                self._adopt(fd)

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
        conn = Connection(sock, conn_id, self.plan.handler_for(conn_id))
        self.conns[conn_id] = conn
        self.by_fd[conn.fd] = conn
        self.sel.register(conn.fd, selectors.EVENT_READ, conn)
        self.board.set(self.slot, procs.CONNECTIONS, len(self.conns))

    def _close(self, conn: Connection) -> None:
        if self.by_fd.pop(conn.fd, None) is None:
            return
        self.conns.pop(conn.conn_id, None)
        try:
            self.sel.unregister(conn.fd)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        self.requests[conn.handler].send(
            env.REQ_HEADER.pack(conn.conn_id, 0, env.REQ_CLOSED))
        self.dirty_handlers.add(conn.handler)
        self.board.set(self.slot, procs.CONNECTIONS, len(self.conns))

    # -- reading requests --------------------------------------------------
    def _read(self, conn: Connection) -> None:
        if conn.closing:
            return
        if conn.end == len(conn.buf):
            self._make_room(conn, _RECV_CHUNK)
        try:
            n = conn.sock.recv_into(conn.view[conn.end:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if n == 0:
            self._close(conn)
            return
        conn.end += n
        self.count(procs.BYTES_IN, n)
        self._frames(conn)

    def _make_room(self, conn: Connection, need: int) -> None:
        """Move unread bytes to the front, growing the buffer to hold ``need``."""
        pending = conn.end - conn.start
        if conn.start:
            conn.buf[:pending] = conn.view[conn.start:conn.end]
            conn.start, conn.end = 0, pending
        if len(conn.buf) < need:
            conn.view.release()
            conn.buf.extend(bytes(need - len(conn.buf)))
            conn.view = memoryview(conn.buf)

    def _frames(self, conn: Connection) -> None:
        view = conn.view
        handler = conn.handler
        sender = self.requests[handler]
        sent = 0
        need = 0  # room the next, incomplete frame needs in conn.buf
        while not conn.closing:
            avail = conn.end - conn.start
            if avail < 4:
                break
            size = _SIZE.unpack_from(view, conn.start)[0]
            if size < 8 or size > self.max_frame:
                if size < 8 or avail < 12:
                    if size < 8:
                        self._local_answer(conn, [], env.RESP_CLOSE_NOW)
                    break
                correlation_id = _HEAD.unpack_from(view, conn.start)[3]
                self._local_answer(conn, [api.encode_error_frame(correlation_id, 14)],
                                   env.RESP_CLOSE_AFTER)
                self.count(procs.ERRORS)
                break
            if avail < 4 + size:
                need = 4 + size
                break
            frame = view[conn.start + 4:conn.start + 4 + size]
            conn.start += 4 + size
            if api.peek_produce_acks(frame) == 0:
                seq, flags = 0, env.REQ_NO_RESPONSE
            else:
                seq, flags = conn.next_seq, 0
                conn.next_seq += 1
            sender.send(env.REQ_HEADER.pack(conn.conn_id, seq, flags), frame)
            sent += 1
        frame = view = None  # drop our views of conn.buf before it may move or grow
        if sent:
            self.count(procs.REQUESTS, sent)
            self.dirty_handlers.add(handler)
            # the queued frames are views into conn.buf: into the ring, or copied, before
            # the buffer's bytes move
            if not sender.pump():
                sender.own()
                self._pause(True)
        if conn.start == conn.end:
            conn.start = conn.end = 0
        elif need and conn.start + need > len(conn.buf):
            self._make_room(conn, need)
        if conn.closing or conn.outstanding >= self.max_in_flight:
            self._set_reading(conn, False)

    def _local_answer(self, conn: Connection, pieces: list, flags: int) -> None:
        """Answer generated here (bad frame size); it waits its turn like any other."""
        seq = conn.next_seq
        conn.next_seq += 1
        conn.closing = True
        conn.ready[seq] = (pieces, flags)
        self._flush_ready(conn)

    # -- writing answers ----------------------------------------------------
    def _take_answers(self) -> None:
        for h, receiver in enumerate(self.responses):
            messages = receiver.poll()
            for m in messages:
                conn_id, seq, flags, pieces = env.decode_response(m)
                conn = self.conns.get(conn_id)
                if conn is None:
                    continue
                conn.ready[seq] = (pieces, flags)
                self._flush_ready(conn)
            if receiver.done():
                self.handler_bells[h].ring()

    def _flush_ready(self, conn: Connection) -> None:
        while conn.send_seq in conn.ready:
            pieces, flags = conn.ready.pop(conn.send_seq)
            conn.send_seq += 1
            if flags & env.RESP_CLOSE_NOW:
                conn.out.append(None)
                break
            conn.out.extend(pieces)
            if flags & env.RESP_CLOSE_AFTER:
                conn.out.append(None)
                break
        self._write(conn)
        if conn.fd in self.by_fd and not conn.closing and conn.outstanding < self.max_in_flight:
            self._set_reading(conn, not self.paused)

    def _write(self, conn: Connection) -> None:
        sock = conn.sock
        out = conn.out
        try:
            while out:
                piece = out[0]
                if piece is None:
                    self._close(conn)
                    return
                if isinstance(piece, env.FilePiece):
                    fd = self.files.open(piece.path)
                    left = piece.length - conn.out_pos
                    n = os.sendfile(conn.fd, fd, piece.position + conn.out_pos, left)
                    if n == 0:
                        raise OSError(errno.EIO, f"segment {piece.path} is shorter than expected")
                    done = n == left
                else:
                    flags = socket.MSG_MORE if len(out) > 1 else 0
                    n = sock.send(memoryview(piece)[conn.out_pos:], flags)
                    done = conn.out_pos + n == len(piece)
                self.count(procs.BYTES_OUT, n)
                if done:
                    out.popleft()
                    conn.out_pos = 0
                else:
                    conn.out_pos += n
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(conn)
            return
        want_write = bool(out)
        if want_write != conn.writing:
            conn.writing = want_write
            self._apply_interest(conn)
        if not out and conn.closing and not conn.outstanding:
            self._close(conn)

    # -- interest bookkeeping --------------------------------------------------
    def _set_reading(self, conn: Connection, reading: bool) -> None:
        if conn.closing:
            reading = False
        if reading != conn.reading:
            conn.reading = reading
            self._apply_interest(conn)

    def _apply_interest(self, conn: Connection) -> None:
        if conn.fd not in self.by_fd:
            return
        events = (selectors.EVENT_READ if conn.reading else 0) | (
            selectors.EVENT_WRITE if conn.writing else 0)
        try:
            key = self.sel.get_key(conn.fd)
        except KeyError:
            key = None
        if events == 0:
            if key is not None:
                self.sel.unregister(conn.fd)
        elif key is None:
            self.sel.register(conn.fd, events, conn)
        elif key.events != events:
            self.sel.modify(conn.fd, events, conn)

    def _pause(self, paused: bool) -> None:
        if paused == self.paused:
            return
        self.paused = paused
        for conn in self.conns.values():
            self._set_reading(conn, not paused and conn.outstanding < self.max_in_flight)

    def _pump_requests(self) -> None:
        for h in list(self.dirty_handlers):
            if self.requests[h].pump():
                self.dirty_handlers.discard(h)
            self.handler_bells[h].ring()
        if self.paused and not self.dirty_handlers:
            self._pause(False)

    def _check_handler_epochs(self) -> None:
        for h in range(self.plan.num_handlers):
            epoch = self.board.epoch(self.plan.board_slot("handler", h))
            if epoch != self.handler_epochs[h]:
                self.handler_epochs[h] = epoch
                for conn in list(self.conns.values()):
                    if conn.handler == h and conn.outstanding:
                        self._close(conn)
