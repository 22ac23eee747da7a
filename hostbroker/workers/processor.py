"""The network processor process, ``hb-proc-N`` (``num.processors`` of them).

Owns: the client connections the acceptor hands it (over a SOCK_SEQPACKET
pair, one fd per message, each acknowledged back so the acceptor can count
connections exactly), each in one ``epoll`` loop (``processor_conns.py``);
the open segment files it sends from. Reads: whole request frames off its sockets, answers from
every handler's response ring, from every writer's answer ring (a writer
answers a one-partition acks=1 PRODUCE itself) and from the coordinator's
(the GROUP_PUTs of ``processor_groups.py``), the partition table, and the
log dir table (its dirs' ids order a partition's replicas across log dirs).
Writes: frames into the request ring of the connection's handler, and
answers back to the sockets in the order the requests came in. A METADATA
or OFFSETS request of a connection with nothing at its handler is answered
here, from the partition table (``processor_frames.py``, ``answers.py``), and
so is a FETCH of one partition, parked here when it must wait for data
(``processor_fetch.py``); a lone PRODUCE (one partition, acks=1, nothing else of its connection in
flight or behind it, its writer asleep or the frame small) goes past the
handler, straight to the writer's ``put`` ring (a PUT), and the writer
answers it; nothing more of that connection is read until it has, and a
writer that dies first has it answered UNKNOWN here (``_fail_puts``).
Which of these ways a frame takes is decided once, in ``processor_routes.py``.
Who each connection is (its identity, taken when the processor takes it and
told to its handler before its frames) and what it may do on the routes
taken here, with ``authorizer.enable``: ``processor_access.py``.
Every request gets a sequence number, its place in that order; answers
that arrive early wait for the ones before them. A PRODUCE with acks=0 gets
an empty answer from its handler, which gives its place back without
sending a byte, so an error frame for it still comes in order.

A connection of an ``ssl://`` listener makes its TLS handshake in this loop
first, and its bytes are read and written through TLS (``tls.py``: the
handshake's deadline and slots, plaintext left inside the TLS object, file
pieces by ``pread``).

Protocol rules enforced here, before anything is decoded: a size over
``socket.request.max.bytes`` is answered with a REQUEST_TOO_LARGE error frame
and the connection closes; a size too small to hold a correlation id (or
negative) closes it with no answer. Both take their turn after earlier
answers.

Ending after an error frame (or a close with no answer): no further frame
goes to the handler once the processor knows; after the last byte is written
the socket is shut for writing (the client reads the answers, then EOF) and
*lingers*: read only to drop what the client still sends (into the receive
buffer) until it closes, ``connection.linger.ms`` pass or
``connection.linger.max.bytes`` came. Closing with unread bytes would send a
TCP reset, which can destroy the error frame before the client reads it. A
lingering connection still counts against ``max.connections``.

Memory: sockets are read into one receive buffer per processor; a connection
keeps only the bytes of a frame not complete yet, in a buffer that grows as
they arrive (never to the size a header claims) and is freed when the frame
is done (the books of a connection and its buffers: ``connection.py``). A
large frame (``DIRECT_AT`` and up) whose rest is all in the socket's receive
buffer is received straight into its record in the request ring instead, so
its bytes are copied once on their way to the handler, not twice
(``processor_frames.py``). A started frame must be complete within
``socket.request.read.timeout.ms`` and a connection that moves no byte for
``connections.max.idle.ms`` (with nothing at its handler or writer, and no
FETCH waiting here) is closed.

Backpressure and fairness: a connection is not read while it has
``max.in.flight.requests.per.connection`` requests not completely answered
(an answer counts until its last byte is written), while
``connection.max.handler.requests`` of its requests are at the handler
(in the ring or being served: one connection's burst cannot fill the ring
ahead of the others), while ``connection.max.queued.bytes`` of answers wait
to be written, or while an answer of it is held because its principal went
past a quota (``throttle.py``). While a request ring is full no socket is read at all. When a
handler is replaced, the connections waiting on it are closed (their requests
died with it).
"""

from __future__ import annotations

import collections
import errno
import os
import select
import socket
import time

from hostbroker.protocol import api
from hostbroker.shm import procs
from hostbroker.shm.partitions import PartitionTable
from hostbroker.workers import envelopes as env
from hostbroker.workers.access import open_access
from hostbroker.workers.answers import TableAnswers, broker_list
from hostbroker.workers.base import Worker
from hostbroker.workers.connection import CLOSE, END, RECV_CHUNK, Buffers, Connection
from hostbroker.workers.processor_access import ConnectionAccess
from hostbroker.workers.processor_claims import RingClaims
from hostbroker.workers.processor_conns import (
    READABLE,
    WATCH_READ,
    WATCH_WRITE,
    WRITABLE,
    Connections,
)
from hostbroker.workers.processor_fetch import LocalFetching
from hostbroker.workers.processor_frames import SEQ_MASK, FrameReading
from hostbroker.workers.processor_groups import GroupPutting
from hostbroker.workers.processor_routes import Routes
from hostbroker.workers.sendfiles import FetchV1Head, HeldPiece, SegmentFiles, pin_answer
from hostbroker.workers.stats_record import UNRECORDED, Recorder
from hostbroker.workers.throttle import Throttling
from hostbroker.workers.tls import TlsConnections, send_file_piece
from hostbroker.workers.topicview import TopicView, log_dir_table

_IDLE_TIMEOUT_S = 1.0
_FD_SWEEP_S = 5.0


class ProcessorWorker(Connections, FrameReading, RingClaims, LocalFetching, GroupPutting,
                      TlsConnections, ConnectionAccess, Throttling, Worker):
    kind = "processor"
    process_name = "hb-proc"
    stats = UNRECORDED  # (init_process attaches this process's own)

    def init_process(self) -> None:
        super().init_process()
        plan = self.plan
        advertised = self.config["advertised.listeners"]
        brokers = broker_list(plan, self.config["broker.id"],
                              advertised=advertised)  # before the listeners close
        tls_brokers = broker_list(plan, self.config["broker.id"], tls=True, advertised=advertised)
        for i, (acceptor_end, processor_end) in enumerate(plan.handoff):
            acceptor_end.close()
            if i != self.index:
                processor_end.close()
        self._init_tls(plan, self.config)  # (which listeners are ssl://, before they close)
        for _, listener in plan.listeners:
            listener.close()
        self.handoff = plan.handoff[self.index][1]
        self.handoff.setblocking(False)
        self.acks_owed = 0
        config = self.config
        self.max_frame = config["socket.request.max.bytes"]
        self.max_in_flight = config["max.in.flight.requests.per.connection"]
        self.max_at_handler = config["connection.max.handler.requests"]
        self.max_queued = config["connection.max.queued.bytes"]
        self.copy_max = config["processor.fetch.copy.max.bytes"]
        self.idle_timeout = config["connections.max.idle.ms"] / 1000
        self.read_timeout = config["socket.request.read.timeout.ms"] / 1000
        self.linger_s = config["connection.linger.ms"] / 1000
        self.linger_bytes = config["connection.linger.max.bytes"]
        self.lingering: collections.deque[Connection] = collections.deque()  # by deadline
        self.expire_every = min(_IDLE_TIMEOUT_S, max(0.01, min(self.idle_timeout,
                                                               self.read_timeout) / 10))
        self.recv_buf = bytearray(RECV_CHUNK)
        self.recv_view = memoryview(self.recv_buf)
        self.buffers = Buffers()
        self.requests = [self.sender("req", self.index, h) for h in range(plan.num_handlers)]
        self.responses = [self.receiver("resp", h, self.index) for h in range(plan.num_handlers)]
        self.handler_bells = [self.waker("handler", h) for h in range(plan.num_handlers)]
        # answers writers send here themselves (one-partition acks=1 PRODUCEs), and
        # the coordinator (GROUP_PUTs), which comes after the writers (plan.coordinator_peer)
        self.writer_answers = ([self.receiver("ans", w, self.index)
                                for w in range(plan.num_writers)]
                               + [self.receiver("cans", 0, self.index)])
        self.writer_bells = ([self.waker("writer", w) for w in range(plan.num_writers)]
                             + [self.waker("coordinator", 0)])
        # the board slots of the handlers, then the writers and the coordinator, and
        # their epochs as last seen
        self._peer_slots = ([plan.board_slot("handler", h) for h in range(plan.num_handlers)]
                            + [plan.board_slot("writer", w) for w in range(plan.num_writers)]
                            + [plan.board_slot("coordinator", 0)])
        self._read_peer_epochs = self.board.epochs(self._peer_slots)
        self._peer_epochs = self._read_peer_epochs()
        # (receiver, whether it holds records not taken yet, the bell of its sender)
        self._answer_inputs = (
            [(r, r.has_unread, bell) for r, bell in zip(self.responses, self.handler_bells)]
            + [(r, r.has_unread, bell) for r, bell in zip(self.writer_answers, self.writer_bells)])
        self.files = SegmentFiles(config["segment.fd.cache.size"])
        self.access = open_access(plan, self.config)  # ACLs and quotas (docs/security.md)
        self._init_access(config)  # identities and decisions (processor_access)
        self._init_throttle(plan, config)  # quotas: counting, holding answers (throttle.py)
        self.stats = Recorder(plan, self.kind, self.index)
        self._api_request = self.stats.request
        self.table_answers = None  # METADATA and OFFSETS answered here (processor_frames)
        self.tls_answers = None  # the same for the clients of ssl:// listeners
        self.puts = None  # lone PRODUCEs straight to writers (processor_frames)
        self.view = None
        if (config["processor.local.requests"] or config["processor.direct.produce"]
                or config["processor.local.fetch"] or config["processor.direct.groups"]):
            self.view = TopicView(PartitionTable.attach(plan.table_name), plan.log_dirs,
                                  config.log_defaults(), log_dir_table(plan))
        if config["processor.local.requests"]:
            self.table_answers = TableAnswers(self.view, plan.log_dirs, config["broker.id"],
                                              brokers,
                                              config["response.max.bytes"])
            if tls_brokers is not None:  # (its ssl:// clients are sent to ssl:// listeners)
                self.tls_answers = TableAnswers(self.view, plan.log_dirs, config["broker.id"],
                                                tls_brokers, config["response.max.bytes"])
        self._init_group_puts(config)  # processor_groups
        if config["processor.direct.produce"]:
            self.puts = [self.sender("put", self.index, w) for w in range(plan.num_writers)]
            self.put_max = min(s.max_whole for s in self.puts) - 4096  # frame, past its envelope
            self.put_gather_max = config["processor.direct.produce.max.bytes"]
            self.put_busy_max = config["processor.direct.produce.busy.max.bytes"]
        self.ring_receive = config["processor.ring.receive"]
        self.put_spin_ns = config["processor.put.spin.us"] * 1000
        self.lone_after = config["processor.direct.lone.after"]
        self.puts_out = 0  # PUTs at writers, not answered yet
        self.max_entries = config["request.max.entries"]
        self.max_response_bytes = config["response.max.bytes"]
        self.answered_here: set[Connection] = set()  # to write once the round's reads are done
        self._init_local_fetch()  # FETCHes answered and parked here (processor_fetch)
        # each frame's way from here: one decision (processor_routes)
        self.routes = Routes(answers=self.table_answers is not None,
                             tls_answers=self.tls_answers is not None,
                             fetch=self.local_fetch,
                             put_max=self.put_max if self.puts is not None else -1,
                             group_puts=self.group_puts is not None,
                             enforcing=self.enforcing,
                             busy_max=self.put_busy_max if self.puts is not None else -1,
                             max_parked=config["processor.fetch.max.parked"])
        self.conns: dict[int, Connection] = {}
        self.by_fd: dict[int, Connection] = {}
        self.counter = 0
        self.paused = False
        self.dirty_handlers: set[int] = set()
        self.now = time.monotonic()
        # epoll itself, not a selector: its per-event bookkeeping cost a good
        # part of a small request (connections are found by fd in by_fd)
        self.epoll = select.epoll()
        self.epoll.register(self.doorbell.fileno(), select.EPOLLIN)
        self.epoll.register(self.handoff.fileno(), select.EPOLLIN)
        self.board.set_state(self.slot, procs.WORKER_READY)

    # -- loop --------------------------------------------------------------
    def run(self) -> None:
        next_sweep = time.monotonic() + _FD_SWEEP_S
        next_expiry = time.monotonic() + self.expire_every
        drain_deadline = None
        sleeper, wait, spin = self.sleeper, self._events, self.sleeper.spin_ns
        doorbell, handoff, by_fd = self.doorbell.fileno(), self.handoff.fileno(), self.by_fd
        worked = False
        while True:
            if self.stopping and drain_deadline is None:
                drain_deadline = self._start_drain()
            if drain_deadline is not None and (
                    not any((c.outstanding or c.out) and not c.lingering
                            for c in self.conns.values())
                    or time.monotonic() > drain_deadline):
                break
            timeout = 0.005 if self.dirty_handlers else self.expire_every
            if self.parked:
                timeout = self._fetch_timeout(timeout)
            if self.lingering:
                timeout = max(0.0, min(timeout, self.lingering[0].linger_until - self.now))
            if self.held_heap:  # answers held for a quota (throttle.py)
                timeout = max(0.0, min(timeout, self.held_heap[0][0] - self.now))
            if self.tls_hurry or self.tls_owed:
                timeout = 0.0  # plaintext inside a TLS object, or a handshake step (tls.py)
            events = None
            if worked and spin:
                events = self._spin()
            elif self.puts_out and self.put_spin_ns:
                events = self._spin(self.put_spin_ns)  # a PUT's answer is on its way
            if not events:
                events = sleeper.sleep(wait, timeout)
            start = time.monotonic_ns()
            if self.local_fetch:
                self.appended_seen = self._appended()  # before this round's fetches read the log
                self.fetch_looked = 0  # partitions looked up for FETCHes this round
            worked = bool(events) or self._has_input()
            self.now = time.monotonic()
            self.tls_steps, self.tls_owed = 0, False  # handshake steps this round (tls.py)
            for fd, mask in events:
                conn = by_fd.get(fd)
                if conn is not None:
                    # as selectors tells them: an error or hang-up is both
                    if mask & WRITABLE and conn.watched & WATCH_WRITE:
                        self._write(conn)
                    if mask & READABLE and conn.watched & WATCH_READ and conn.fd in by_fd:
                        self._read(conn)
                elif fd == doorbell:
                    self.doorbell.drain()
                elif fd == handoff:
                    self._accept_handoffs()
            if self.lingering:
                self._end_lingers()
            if self.tls_pending or self.tls_hurry:
                self._tls_round()
            if self.now >= self.quota_next or (self.stopping and self.held_heap):
                self._throttle_round()
            self.heartbeat()
            self._check_handler_epochs()
            self._take_answers()
            if self.parked and self._parked_due():
                self._recheck_parked()
            if self.answered_here:
                self._send_answered_here()
            if self.local_fetch:
                self._show_parked()
            self._pump_requests()
            if self.acks_owed:
                self._send_acks()
            if self.now > next_expiry:
                self._expire()
                next_expiry = self.now + self.expire_every
            if self.now > next_sweep:
                self.files.sweep()
                next_sweep = self.now + _FD_SWEEP_S
            if worked:
                self.work_ns += time.monotonic_ns() - start
        for conn in list(self.conns.values()):
            self._close(conn)
        self._pump_requests()
        self.files.close()

    def _has_input(self) -> bool:
        """Records in an answer ring, or, with fetches parked, appends since
        this round began (see ``handler._has_input``: the same handshake)."""
        if super()._has_input():
            return True
        return bool(self.parked) and self._appended() != self.appended_seen

    def _spin(self, spin_ns: int | None = None) -> list:
        """Look at the sockets and the answer rings for up to ``worker.spin.us``
        (or ``spin_ns``); the socket events found (or [] with answers waiting,
        or nothing found)."""
        found: list = []
        events = self._events

        def poll() -> bool:
            nonlocal found
            found = events(0)
            return bool(found)

        self.sleeper.spin(poll, spin_ns)
        return found

    def _start_drain(self) -> float:
        """Stop taking connections and requests; answer what is in flight."""
        try:
            self.epoll.unregister(self.handoff.fileno())
        except OSError:
            pass
        for conn in list(self.conns.values()):
            if conn.lingering:
                continue  # closes when its linger ends, or with the rest at the end
            conn.closing = True
            if not conn.outstanding and not conn.out:
                self._close(conn)
            else:
                self._set_reading(conn, False)
        return time.monotonic() + self.config["shutdown.timeout.ms"] / 1000

    # -- reading requests --------------------------------------------------
    def _update_reading(self, conn: Connection) -> None:
        """Read ``conn`` again if it may; frames it has buffered go first."""
        if conn.fd not in self.by_fd or conn.lingering:
            return
        may = not self.paused and self._may_read(conn)
        if may and conn.end and not conn.reading:
            self._frames_buffered(conn)
            if conn.fd not in self.by_fd:
                return
            may = not self.paused and self._may_read(conn)
        self._set_reading(conn, may)

    # -- writing answers ----------------------------------------------------
    def _take_answers(self) -> None:
        for receiver, unread, bell in self._answer_inputs:
            if unread():  # (else nothing was taken since the last done(): nothing to free)
                for m in receiver.poll():
                    self._take_answer(m)
                if receiver.done():
                    bell.ring()  # it waits for space: always ring

    def _take_answer(self, m) -> None:
        conn_id, seq, flags, pieces, stamp = env.decode_response(m)
        self.wait_ns += time.monotonic_ns() - stamp
        conn = self.conns.get(conn_id)
        if conn is None:
            return
        # the ring carries 32 bits of the place; fewer than 2**32 are open
        seq = conn.send_seq + ((seq - conn.send_seq) & SEQ_MASK)
        if seq >= conn.next_seq or seq in conn.ready:
            # a second answer to a request: a writer answered it and died before
            # its handler heard, so the handler answered too. The first one stands.
            return
        if conn.at_writer and seq == conn.writer_seq:
            self._put_answered(conn)
        else:
            conn.at_handler -= 1
            if conn.pipelining and (conn.end or conn.claim is not None):
                conn.behind = True  # the frame coming in was sent before this answer
        if conn.lingering:
            return  # pipelined behind its error frame: dropped
        if flags & env.RESP_FETCH_V1 and pieces:
            pieces[0] = FetchV1Head(pieces[0])  # (so a piece dropped is patched as v1)
        self._queue_answer(conn, seq, pieces, flags)

    def _send_answered_here(self) -> None:
        """Write the answers built in this process (processor_frames) this round."""
        pending = self.answered_here
        while pending:
            conn = pending.pop()
            if conn.fd in self.by_fd:
                self._write(conn)
                self._update_reading(conn)

    def _answered(self, conn: Connection, seq: int) -> None:
        """The answer of place ``seq`` is handed over for writing: count its
        request and latency (every answer of a connection passes here once)."""
        begun = conn.started.pop(seq, None)
        if begun is not None:
            self._api_request(begun[0], time.monotonic_ns() - begun[1])

    def _queue_answer(self, conn: Connection, seq: int, pieces: list, flags: int) -> None:
        if flags & (env.RESP_CLOSE_AFTER | env.RESP_CLOSE_NOW):
            conn.closing = True  # no further frame of it goes to the handler
        self._answered(conn, seq)
        if conn.quota is None:
            conn.order(seq, pieces, flags)
        else:
            self._order_metered(conn, seq, pieces, flags)  # held past a quota (throttle.py)
        self._write(conn)
        self._update_reading(conn)

    def _write(self, conn: Connection) -> None:
        if conn.lingering:
            return
        if conn.tls is not None and conn.tls.handshaking:
            self._handshake(conn)
            return
        sock = conn.sock
        out = conn.out
        try:
            while out:
                piece = out[0]
                if piece is END:
                    out.popleft()
                    conn.written += 1
                    conn.pinned = False
                    continue
                if piece is CLOSE:
                    self._linger(conn)
                    return
                if not conn.pinned:
                    # before the answer's first byte: its files held or its sizes fixed
                    conn.queued += pin_answer(out, self.files, (END, CLOSE), self.copy_max)
                    conn.pinned = True
                    piece = out[0]
                if isinstance(piece, HeldPiece):
                    left = piece.length - conn.out_pos
                    if conn.tls is None:
                        n = os.sendfile(conn.fd, piece.fd, piece.position + conn.out_pos, left)
                    else:  # no sendfile through TLS
                        n = send_file_piece(sock, piece.fd, piece.position + conn.out_pos, left)
                    if n == 0:
                        raise OSError(errno.EIO, "a segment is shorter than its answer says")
                    done = n == left
                    if done:
                        os.close(piece.fd)
                else:
                    flags = socket.MSG_MORE if len(out) > 2 else 0
                    n = sock.send(memoryview(piece)[conn.out_pos:], flags)
                    done = conn.out_pos + n == len(piece)
                    if done:
                        conn.queued -= len(piece)
                self.count(procs.BYTES_OUT, n)
                conn.active = self.now
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
            if not want_write:
                self._update_reading(conn)
        if not out and conn.closing and not conn.outstanding:
            self._close(conn)

    def _pause(self, paused: bool) -> None:
        if paused == self.paused:
            return
        self.paused = paused
        for conn in list(self.conns.values()):
            self._update_reading(conn)

    def _pump_requests(self) -> None:
        for h in list(self.dirty_handlers):
            if self.requests[h].pump():
                self.dirty_handlers.discard(h)
            self.handler_bells[h].wake()
        if self.paused and not self.dirty_handlers:
            self._pause(False)

    def _check_handler_epochs(self) -> None:
        """A handler, writer or the coordinator replaced since the last look
        (its epoch moved): close the connections with requests at that
        handler, fail the PUTs (GROUP_PUTs) at that writer (coordinator).
        Every loop round: one read per peer when none moved."""
        now = self._read_peer_epochs()
        if now == self._peer_epochs:
            return
        moved = [i for i, (a, b) in enumerate(zip(now, self._peer_epochs)) if a != b]
        self._peer_epochs = now
        handlers = self.plan.num_handlers
        for i in moved:
            if i < handlers:
                for conn in list(self.conns.values()):
                    if conn.handler == i and conn.at_handler and not conn.lingering:
                        self._close(conn)
                self._retell(i)  # (processor_access)
            else:
                self._fail_puts(i - handlers)

    def _fail_puts(self, w: int) -> None:
        """Writer ``w`` (or the coordinator, ``plan.coordinator_peer``) was
        replaced: answer UNKNOWN each PUT (GROUP_PUT) it never answered, as a
        handler answers what a dead writer left. What it did answer is in its
        answer ring (only the rings it read were emptied): taken first."""
        self._take_answers()
        for conn in list(self.conns.values()):
            if not (conn.at_writer and conn.writer == w):
                continue
            self._put_answered(conn)
            corr, unanswered, args = conn.writer_put
            frame, failed = api.encode_answer(corr, unanswered(*args), self.max_response_bytes)
            self.stats.error(conn.started.get(conn.writer_seq, (-1,))[0])  # UNKNOWN: an error
            if not conn.lingering:
                self._queue_answer(conn, conn.writer_seq, [frame],
                                   env.RESP_CLOSE_AFTER if failed else 0)
