"""How a processor reads request frames off a socket and hands them to the
connection's handler (a part of :mod:`hostbroker.workers.processor`).

Owns: cutting the bytes of a connection into frames, the size checks made
before anything is decoded, sending each whole frame the way its route says
(:mod:`~hostbroker.workers.processor_routes` decides it, once per frame):
answering METADATA and OFFSETS here (``processor.local.requests``, built by
:mod:`~hostbroker.workers.answers`), FETCHes answered or parked here
(:mod:`~hostbroker.workers.processor_fetch`), lone PRODUCEs put straight to
a writer (PUTs), GROUP_PUTs (:mod:`~hostbroker.workers.processor_groups`);
and the ways any other frame reaches its record in the request ring: small
frames through the processor's receive buffer (many per read); a large
frame (64 KiB or more) received straight into its ring record as its bytes
come (:mod:`~hostbroker.workers.processor_claims`); and a large frame that
could not have a record gathered in the connection's own buffer first (or,
larger than a ring record, sent in fragments).

:class:`FrameReading` is a mixin of :class:`~hostbroker.workers.processor.ProcessorWorker`
and uses its connections, rings, buffers and counters.
"""

from __future__ import annotations

import fcntl
import struct
import sys
import termios
import time
import traceback

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api, throttled
from hostbroker.protocol.lone import peek_lone_produce
from hostbroker.security.acl import Operation, ResourceType
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.connection import DIRECT_AT, RECV_CHUNK, Connection
from hostbroker.workers.processor_routes import (ANSWER, FETCH, GROUP_PUT, NOT_DECODED, PUT,
                                                 Peek)

SIZE = struct.Struct(">i")
HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_KEY_CORR = struct.Struct(">hhi")  # the same, of a frame without its size
SEQ_MASK = 0xFFFFFFFF
WRITE, TOPIC = Operation.WRITE, ResourceType.TOPIC
_INT = struct.Struct("i")
LARGE_HEAD = 512  # bytes read of the frame after a large one, before its ring record is claimed


def unanswered_produce(topic: str, partition: int) -> api.ProduceResponse:
    """The answer of a PUT whose writer died with it."""
    return api.ProduceResponse((api.ProducePartitionResult(topic, partition, ErrorCode.UNKNOWN,
                                                           -1, -1),))


def unanswered_produce_v1(topic: str, partition: int) -> throttled.ProduceResponseV1:
    """The same, of a PRODUCE v1."""
    return throttled.ProduceResponseV1(unanswered_produce(topic, partition).partitions)


def unread_bytes(sock) -> int:
    """Bytes waiting in the socket's receive buffer (FIONREAD)."""
    return _INT.unpack(fcntl.ioctl(sock.fileno(), termios.FIONREAD, bytes(_INT.size)))[0]


class FrameReading:
    """Reading request frames; see the module doc."""

    def _may_read(self, conn: Connection) -> bool:
        # nothing more while a PUT is at its writer: a later PRODUCE through the
        # handler could reach the writer first
        # (and nothing before the connection's identity is known: processor_access)
        return (not conn.closing and not conn.at_writer and conn.identity is not None
                and conn.outstanding < self.max_in_flight
                and conn.at_handler < self.max_at_handler and conn.queued < self.max_queued
                and (conn.quota is None or not conn.quota.held))  # (muted: throttle.py)

    def _put_candidate(self, conn: Connection, need: int, head) -> bool:
        """Whether the large frame ``head`` begins (its first bytes, ``need`` in
        all) may go past the handler as a PUT: received into a put ring
        record when its first bytes say it may (:meth:`_claim_put`), else,
        up to ``processor.direct.produce.max.bytes``, gathered here and
        decided when whole. Its route, told from its head as if it were whole
        and the last frame read."""
        if len(head) < HEAD.size:
            return False
        api_key, version = HEAD.unpack_from(head, 0)[1:3]
        return self.routes.route(conn, api_key, version, need - SIZE.size, True) == PUT

    def _read(self, conn: Connection) -> None:
        if conn.lingering:
            self._drop_input(conn)
            return
        if conn.tls is not None and conn.tls.handshaking:
            self._handshake(conn)  # (workers/tls.py)
            return
        if not conn.reading:
            self._apply_interest(conn, lazy=False)  # readable but may not read: stop watching
            return
        if conn.claim is not None:
            self._fill_claim(conn)
            self._update_reading(conn)
            return
        # the rest of a large frame goes straight into its ring record, or into
        # its own buffer; anything else through the processor's receive buffer
        need = conn.frame_need(self.max_frame)
        if need >= DIRECT_AT and need > conn.end:
            if self._put_candidate(conn, need, conn.buf if conn.end >= HEAD.size else b""):
                # (told from its first bytes: not tried again once much of it is gathered)
                claimed = (conn.end < DIRECT_AT and self._claim_put(conn, need)) or (
                    need - SIZE.size > self.put_gather_max and self._claim(conn, need))
            else:
                claimed = self._claim(conn, need)
            if claimed:
                self._update_reading(conn)
                return
        direct = conn.end >= DIRECT_AT and need > conn.end
        if direct:
            want = min(need - conn.end, max(conn.end, RECV_CHUNK))
            conn.reserve(want, need, self.buffers)
            target = memoryview(conn.buf)[conn.end:conn.end + want]
        elif conn.large_next:
            # after a large frame, most likely another: its first bytes alone (its
            # header, and for a PRODUCE where its message set begins), so the rest
            # can go straight into its ring record (one read more if not)
            conn.large_next = False
            target = self.recv_view[:LARGE_HEAD]
        else:
            target = self.recv_view
        n = self._recv(conn, target)
        target = None
        if n <= 0:
            return
        if direct:
            conn.end += n
            if conn.end == need:
                self._frames_buffered(conn)
        elif not conn.end:
            chunk = self.recv_view[:n]
            used = self._frames(conn, chunk)
            if (used < n and conn.fd in self.by_fd and not conn.lingering
                    and not self._claim_rest(conn, chunk[used:])):
                conn.append(chunk[used:], 0, self.buffers)
                self.count(procs.BYTES_COPIED, n - used)
                conn.frame_started = self.now
            chunk = None
        else:
            conn.append(self.recv_view[:n], need, self.buffers)
            self.count(procs.BYTES_COPIED, n)
            self._frames_buffered(conn)
        self._update_reading(conn)

    def _recv(self, conn: Connection, target) -> int:
        """One ``recv_into`` of ``target``: the bytes that came (counted), -1 when
        none were there, 0 when the connection ended (it is closed then). The
        caller lets go of ``target`` after it."""
        try:
            n = conn.sock.recv_into(target)
        except (BlockingIOError, InterruptedError):
            return -1
        except OSError:
            n = 0
        if n == 0:
            self._close(conn)
            return 0
        conn.active = self.now
        self.count(procs.BYTES_IN, n)
        if conn.tls is not None:
            self._tls_read_more(conn)  # plaintext left inside the TLS object
        return n

    def _frames_buffered(self, conn: Connection) -> None:
        """Send what ``conn.buf`` holds of whole frames; move the rest to its
        front, or to a smaller buffer when the rest is much smaller than it."""
        view = memoryview(conn.buf)[:conn.end]
        used = self._frames(conn, view)
        view = None
        if not used or conn.fd not in self.by_fd or conn.lingering:
            return
        conn.consumed(used, self.buffers)
        conn.frame_started = self.now

    def _frames(self, conn: Connection, data) -> int:
        """Send the whole frames at the start of ``data`` to the handler, as far as
        the connection may; returns the bytes used."""
        view = memoryview(data)
        end = len(view)
        pos = 0
        stamp = time.monotonic_ns()
        handler = conn.handler
        sender = self.requests[handler]
        local = self.table_answers if conn.tls is None else self.tls_answers
        route_of = self.routes.route
        started = conn.started
        sent = copied = 0
        while self._may_read(conn):
            avail = end - pos
            if avail < 4:
                break
            size = SIZE.unpack_from(view, pos)[0]
            if size < 8 or size > self.max_frame:
                if size < 8:
                    self._local_answer(conn, [], env.RESP_CLOSE_NOW)
                elif avail >= HEAD.size:
                    _, api_key, _, correlation_id = HEAD.unpack_from(view, pos)
                    started[conn.next_seq] = (api_key, stamp)  # a request, and an error
                    self.stats.error(api_key)
                    self._local_answer(conn, [api.encode_error_frame(
                        correlation_id, ErrorCode.REQUEST_TOO_LARGE)], env.RESP_CLOSE_AFTER)
                    self.count(procs.ERRORS)
                break
            if avail < 4 + size:
                break
            api_key, version = HEAD.unpack_from(view, pos)[1:3]
            frame = view[pos + 4:pos + 4 + size]
            pos += 4 + size
            # whichever way it takes, its answer has place next_seq (API stats)
            started[conn.next_seq] = (api_key, stamp)
            if conn.quota is not None:  # its principal has a quota (throttle.py)
                self._quota_request(conn, api_key, version, 4 + size)
            # its route (processor_routes); a way past the handler that declines
            # once it has looked into the frame leaves it to the handler
            route = route_of(conn, api_key, version, size, pos == end)
            if route:
                if route == ANSWER:
                    self._answer_here(conn, local, frame)
                    continue
                if route == FETCH:
                    if self._fetch_here(conn, frame, version):
                        continue
                elif route == PUT:
                    if self._put(conn, frame, stamp, version):
                        continue
                elif route == GROUP_PUT and self._group_put(conn, frame):
                    continue
            if conn.pipelining:
                self._pipelining_still(conn, pos == end and not conn.at_handler)
            conn.at_handler += 1
            sender.send(env.REQ_HEADER.pack(conn.conn_id, conn.next_seq & SEQ_MASK, 0, stamp),
                        frame)
            conn.next_seq += 1
            sent += 1
            copied += size
        frame = view = None  # the ring or the sender's copies hold the frames from here
        if sent:
            self.count(procs.REQUESTS, sent)
            self.count(procs.BYTES_COPIED, copied)
            # queued frames are views of a buffer about to be reused or freed: into
            # the ring, or copied, now
            if sender.pump():
                # the handler may start at once, while this loop goes on with the
                # rest of its round
                self.handler_bells[handler].wake()
            else:
                self.dirty_handlers.add(handler)
                sender.own()
                self._pause(True)
        return pos

    def _put(self, conn: Connection, frame, stamp: int, version: int) -> bool:
        """Send a lone PRODUCE straight to its partition's writer (a PUT), which
        checks and answers it; True if it went. Whether it goes is
        :meth:`Routes.confirm`'s answer (one partition, acks=1, WRITE allowed,
        that partition ONLINE, its writer asleep or the frame at most
        ``processor.direct.produce.busy.max.bytes``: a busy writer leaves the
        CRC checks of larger sets to the handlers, which run side by side);
        anything else, a frame that does not decode or a table that cannot be
        read included, goes to the handler, which answers it as ever. The
        writer answers in the layout of ``version``."""
        try:
            request = peek_lone_produce(frame, self.max_entries, version)
            if request is None:  # not one partition, or does not decode
                peek, slot, s = NOT_DECODED, None, None
            else:
                peek, slot, s = self._put_peek(conn, request.topic, request.partition,
                                               request.acks, 1, len(frame))
        except Exception:  # noqa: BLE001 - the handler answers (and closes) as it always has
            return False
        if self.routes.confirm(PUT, peek) != PUT:
            return False  # (an ACL refusal: the handler answers it, processor_access)
        direct = env.Direct(self.index, conn.conn_id, conn.next_seq & SEQ_MASK,
                            request.correlation_id)
        if not self.puts[s.owner].try_send(*env.encode_put(
                slot, s.name, s.partition, now_ms() + max(0, request.timeout_ms),
                request.message_set, stamp, direct, version)):
            return False
        self.count(procs.REQUESTS)
        self.count(procs.BYTES_COPIED, len(frame))
        self._put_sent(conn, s.owner, direct, unanswered_produce if version == api.API_VERSION
                       else unanswered_produce_v1, s.name, s.partition)
        return True

    def _put_peek(self, conn: Connection, topic: str, partition: int, acks: int,
                  partitions: int, size: int = -1) -> tuple:
        """``(peek, slot, slot state)`` of a PUT to ``topic``/``partition``:
        what :meth:`Routes.confirm` needs (``size``: the whole frame's bytes,
        -1 while only its first bytes are here), and where it would go. May
        raise if the table cannot be read."""
        allowed = not self.enforcing or self._conn_allows(conn, WRITE, TOPIC, topic)
        view = self.view
        view.refresh()
        slot = view.slot(topic, partition)
        s = None if slot is None else view.table.read(slot)
        online = (s is not None and s.state == ptable.ONLINE
                  and (s.name, s.partition) == (topic, partition)
                  and 0 <= s.owner < len(self.puts))
        # (positional, in Peek's order: half the cost of keywords, on every PUT)
        return Peek(True, allowed, acks, partitions, online, size,
                    online and self.writer_bells[s.owner].asleep()), slot, s

    def _put_sent(self, conn: Connection, w: int, direct, unanswered, *args) -> None:
        """A PUT or GROUP_PUT of ``conn`` (its place ``direct.seq``) is in writer
        ``w``'s ring: nothing more of the connection is read until it is
        answered. ``unanswered(*args)`` is its response should the writer die
        first (``_fail_puts``)."""
        conn.at_writer, conn.writer, conn.writer_seq = 1, w, conn.next_seq
        conn.writer_put = (direct.correlation_id, unanswered, args)
        conn.next_seq += 1
        self.puts_out += 1
        self.writer_bells[w].wake()

    def _put_answered(self, conn: Connection) -> None:
        """A PUT of ``conn`` was answered. A client that waits for each answer
        has sent nothing since; one that sent more meanwhile (held unread) is
        pipelining, and keeps the handler's way until it waits for each answer
        again (:meth:`_pipelining_still`): a PUT would stop its pipeline each
        time, and its CRC checks belong to the handlers."""
        conn.at_writer = 0
        self.puts_out -= 1
        conn.lone = 0
        conn.pipelining = conn.end > 0 or self._unread(conn) > 0

    @staticmethod
    def _unread(conn: Connection) -> int:
        """Bytes waiting in ``conn``'s socket (1 if it cannot tell); under TLS
        the plaintext inside its TLS object too (an estimate: the socket's
        are encrypted bytes, but never 0 while plaintext waits)."""
        try:
            held = conn.sock.pending() if conn.tls is not None else 0
            return held + unread_bytes(conn.sock)
        except OSError:
            return 1

    def _pipelining_still(self, conn: Connection, lone: bool) -> None:
        """A request of a pipelining connection goes to its handler, ``lone`` if
        nothing else of the connection is in flight or read behind it. After
        ``processor.direct.lone.after`` lone ones in a row the client waits
        for each answer again: its requests may go past the handler again. A
        frame that began coming before an earlier answer came back (a large one
        received as it comes) is not lone, whenever it ends."""
        lone, conn.behind = lone and not conn.behind, False
        if not lone:
            conn.lone = 0
        elif self.lone_after:
            conn.lone += 1
            if conn.lone >= self.lone_after:
                conn.pipelining, conn.lone = False, 0

    def _answer_here(self, conn: Connection, local, frame) -> None:
        """Answer a METADATA or OFFSETS frame from the partition table in this
        process (nothing of the connection is at its handler, so nothing it sent
        earlier can change the answer); written after this round's reads."""
        seq = conn.next_seq
        conn.next_seq += 1
        self.count(procs.REQUESTS)
        try:
            pieces, flags = local.answer_frame(frame, self.max_entries, self._describer(conn))
        except Exception:  # noqa: BLE001 - one request must never end the processor
            key, _, corr = _KEY_CORR.unpack_from(frame, 0)
            pieces, flags = [api.encode_error_frame(corr, ErrorCode.UNKNOWN)], env.RESP_CLOSE_AFTER
            print(f"hostbroker: {self.name}: request {api.ApiKey(key).name} failed "
                  f"unexpectedly; answered UNKNOWN", file=sys.stderr, flush=True)
            traceback.print_exc()
        if flags:
            conn.closing = True  # no further frame of it goes to the handler
            self.count(procs.ERRORS)
        if flags or local.error:
            self.stats.error(_KEY_CORR.unpack_from(frame, 0)[0])
        self._answered(conn, seq)
        if conn.quota is None:
            conn.order(seq, pieces, flags)
        else:
            self._order_metered(conn, seq, pieces, flags)  # (throttle.py)
        self.answered_here.add(conn)

    def _local_answer(self, conn: Connection, pieces: list, flags: int) -> None:
        """Answer generated here (bad frame size); it waits its turn like any other."""
        seq = conn.next_seq
        conn.next_seq += 1
        conn.closing = True
        self._queue_answer(conn, seq, pieces, flags)

