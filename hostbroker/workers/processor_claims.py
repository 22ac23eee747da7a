"""How a processor receives a large request frame straight into its ring
record as its bytes come (a part of :mod:`hostbroker.workers.processor`).

Owns: claiming a record for a frame of 64 KiB or more once its size is
known (``processor.ring.receive``) in the connection's handler's request
ring, or, for a lone PRODUCE whose first bytes show it may go past the
handler (its route a PUT, :mod:`~hostbroker.workers.processor_routes`),
in its writer's ``put`` ring (the message set alone, behind a PUT
envelope); filling the claim over as many reads as the sender takes;
publishing it when whole; and giving it back when anything else must go
into that ring first (:class:`~hostbroker.shm.channel.Sender` calls
:meth:`RingClaims._give_back`, which moves what came of the frame to the
connection's buffer, where its rest gathers as before), so that one slow
sender holds up nobody. A ring has one claim open at most; a connection
that ends drops its own.

:class:`RingClaims` is a mixin of :class:`~hostbroker.workers.processor.ProcessorWorker`
beside :class:`~hostbroker.workers.processor_frames.FrameReading`, and uses
its connections, rings, buffers and counters.
"""

from __future__ import annotations

import time

from hostbroker.protocol import api
from hostbroker.protocol.primitives import Reader
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.connection import DIRECT_AT, Connection
from hostbroker.workers.processor_frames import (
    HEAD,
    SEQ_MASK,
    SIZE,
    unanswered_produce,
    unanswered_produce_v1,
    unread_bytes,
)
from hostbroker.workers.processor_routes import NOT_DECODED, PUT
from hostbroker.workers.stats_record import FRAME_KEY

PUT_HEAD_MAX = 4096  # bytes of a frame's start looked at for where its message set begins


class RingClaims:
    """Large frames received into their ring records; see the module doc."""

    def _claim_rest(self, conn: Connection, rest) -> bool:
        """The start of a frame left at the end of a read (``conn.buf`` empty):
        into its ring record if it is large; True if it went there."""
        if len(rest) < HEAD.size:
            return False
        size = SIZE.unpack_from(rest, 0)[0]
        need = SIZE.size + size
        if not (DIRECT_AT <= need and size <= self.max_frame and need > len(rest)):
            return False
        if self._put_candidate(conn, need, rest):
            return self._claim_put(conn, need, rest) or (
                need - SIZE.size > self.put_gather_max and self._claim(conn, need, rest))
        return self._claim(conn, need, rest)

    def _claim(self, conn: Connection, need: int, start=None) -> bool:
        """Receive the large frame of ``need`` bytes that ``start`` begins (the
        end of a read, ``conn.buf`` empty; None: what ``conn.buf`` holds) in
        its request-ring record: what came is copied there and the rest
        received in place, now and as it comes (``processor.ring.receive``;
        without it, only when the rest is all in the socket already). True if
        it took the bytes (into the record; without ``processor.ring.receive``
        and a socket that gave less than it said it held, into ``conn.buf``);
        False, nothing changed, when the ring has no room, something is queued
        for it, another frame holds it, or the frame needs fragments."""
        if not self._may_read(conn) or conn.spilled_seq == conn.next_seq:
            return False
        if conn.tls is not None and not self.ring_receive:
            return False  # (FIONREAD counts encrypted bytes under TLS: gathered instead)
        sender = self.requests[conn.handler]
        if sender.claim_open:
            return False  # another connection's frame is coming in there
        if not self.ring_receive:
            try:
                if unread_bytes(conn.sock) < need - (conn.end if start is None else len(start)):
                    return False
            except OSError:
                return False
        header = env.REQ_HEADER.pack(conn.conn_id, conn.next_seq & SEQ_MASK, 0, 0)
        record = sender.claim(header, need - SIZE.size, lambda: self._give_back(conn))
        if record is None:
            return False
        conn.claim, conn.claim_have = record, self._take_start(conn, record, start, SIZE.size)
        record = start = None
        self._fill_claim(conn)
        if conn.claim is not None and not self.ring_receive:
            # the socket gave less than it said it held: keep what came the old way
            self._give_back(conn)
            sender.unclaim()
            conn.spilled_seq = -1
        return True

    def _take_start(self, conn: Connection, record, start, offset: int) -> int:
        """Copy what came of the frame past its first ``offset`` bytes into the
        claimed ``record``: from ``start`` (the end of a read), or from
        ``conn.buf``, which is then given up; the bytes copied."""
        if start is None:
            have = conn.end - offset
            with memoryview(conn.buf) as buf:
                record[:have] = buf[offset:conn.end]
            conn.consumed(conn.end, self.buffers)  # its deadline runs on from when it began
        else:
            have = len(start) - offset
            record[:have] = start[offset:]
            conn.frame_started = self.now
        self.count(procs.BYTES_COPIED, have)
        return have

    def _fill_claim(self, conn: Connection) -> None:
        """Receive more of the frame being received in its ring record; send it
        to the handler once whole. One read: a short one emptied the socket."""
        rest = conn.claim[conn.claim_have:]
        n = self._recv(conn, rest)
        rest = None
        if n <= 0:
            return
        conn.claim_have = have = conn.claim_have + n
        if have < len(conn.claim):
            return
        key = (api.ApiKey.PRODUCE if conn.claim_put is not None
               else FRAME_KEY.unpack_from(conn.claim)[0])
        if conn.quota is not None:  # its principal has a quota (throttle.py)
            self._quota_claimed(conn, key)
        conn.claim = None
        conn.claim_have = 0
        conn.large_next = self.ring_receive
        conn.started[conn.next_seq] = (key, time.monotonic_ns())  # (its place either way)
        self.count(procs.REQUESTS)
        if conn.claim_put is not None:
            self._commit_put(conn)
            return
        if conn.pipelining:
            unread = self._unread(conn)
            self._pipelining_still(conn, not conn.at_handler and not unread)
            # bytes behind it: the next one was sent before this one's answer
            conn.behind = bool(unread) and conn.pipelining
        conn.at_handler += 1
        self.requests[conn.handler].commit(env.REQ_HEADER.pack(
            conn.conn_id, conn.next_seq & SEQ_MASK, 0, time.monotonic_ns()))
        conn.next_seq += 1
        self.handler_bells[conn.handler].wake()

    def _claim_put(self, conn: Connection, need: int, start=None) -> bool:
        """Receive the message set of the large lone PRODUCE that ``start``
        begins (as :meth:`_claim`) straight into a PUT record in its writer's
        put ring, when its first bytes say it may go as a PUT (its route, as
        :meth:`_put_candidate` told it before this is called; one partition,
        acks=1, ONLINE, its writer asleep: the checks of :meth:`_put`); True if
        it went; what it reads of the head is judged by :meth:`Routes.confirm`,
        as :meth:`_put`'s is. Whatever else (no room, a head that does not
        decode) is gathered in the connection's buffer and decided once whole."""
        if (not self.ring_receive or not self._may_read(conn)
                or conn.spilled_seq == conn.next_seq):
            return False
        head = bytes(memoryview(conn.buf)[:min(conn.end, PUT_HEAD_MAX)]) if start is None \
            else start[:PUT_HEAD_MAX]
        try:
            header = api.decode_request_header(head[SIZE.size:])
            version = header.api_version
            reader = Reader(head, SIZE.size + header.body_offset)
            acks, timeout_ms, count = reader.int16(), reader.int32(), reader.int32()
            topic, partition, set_size = reader.string(), reader.int32(), reader.int32()
            set_start = reader.position
            if topic is None or set_start + set_size != need:
                peek, slot, s = NOT_DECODED, None, None
            else:
                peek, slot, s = self._put_peek(conn, topic, partition, acks, count)
        except Exception:  # noqa: BLE001 - gathered whole and decided then, as ever
            return False
        if self.routes.confirm(PUT, peek) != PUT:
            return False
        w = s.owner
        sender = self.puts[w]
        if sender.claim_open:
            return False
        direct = env.Direct(self.index, conn.conn_id, conn.next_seq & SEQ_MASK,
                            header.correlation_id)
        envelope, _ = env.encode_put(slot, s.name, s.partition, 0, b"", 0, direct, version)
        record = sender.claim(envelope, set_size, lambda: self._give_back(conn))
        if record is None:
            return False
        prefix = bytes(head[SIZE.size:set_start])
        conn.claim, conn.claim_have = record, self._take_start(conn, record, start, set_start)
        conn.claim_put = (w, prefix, slot, s.name, s.partition, timeout_ms, direct, version)
        record = start = None
        self._fill_claim(conn)
        return True

    def _commit_put(self, conn: Connection) -> None:
        """The message set of a PUT claim is whole: publish it to its writer."""
        w, _, slot, name, partition, timeout_ms, direct, version = conn.claim_put
        conn.claim_put = None
        envelope, _ = env.encode_put(slot, name, partition, now_ms() + max(0, timeout_ms), b"",
                                     time.monotonic_ns(), direct, version)
        self.puts[w].commit(envelope)
        self._put_sent(conn, w, direct, unanswered_produce if version == api.API_VERSION
                       else unanswered_produce_v1, name, partition)

    def _give_back(self, conn: Connection) -> None:
        """Something else goes to the ring that ``conn``'s frame is being
        received into: what came of the frame moves to ``conn.buf``, where
        the rest gathers (this frame is not claimed again)."""
        record = conn.claim
        conn.claim = None
        have, conn.claim_have = conn.claim_have, 0
        prefix = b""
        if conn.claim_put is not None:
            prefix = conn.claim_put[1]  # the frame's bytes before its message set
            conn.claim_put = None
        need = SIZE.size + len(prefix) + len(record)
        conn.append(SIZE.pack(need - SIZE.size) + prefix, need, self.buffers)
        conn.append(record[:have], need, self.buffers)
        record = None
        self.count(procs.BYTES_COPIED, len(prefix) + have)
        conn.spilled_seq = conn.next_seq

    def _drop_claim(self, conn: Connection) -> None:
        """``conn`` ends: the frame it was receiving into a ring goes nowhere."""
        if conn.claim is not None:
            conn.claim = None
            conn.claim_have = 0
            if conn.claim_put is not None:
                self.puts[conn.claim_put[0]].unclaim()
                conn.claim_put = None
            else:
                self.requests[conn.handler].unclaim()
