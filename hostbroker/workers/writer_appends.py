"""How a writer appends what handlers send it and answers acks=1 (part of
``hb-writer-N``).

Mixed into :class:`~hostbroker.workers.writer.WriterWorker`, whose partition
logs, rings and books it uses. Owns: one APPEND's way into its partition log
(the slot must still hold the partition it names; a failed write takes the
log dir offline), the message sets appended straight from a request ring
(APPEND_REF: only while the handler holding them lives, and cut off again if
it died during the write), the lone PRODUCEs processors send past the
handlers (PUTs: their sets checked here as a handler would), and the acks=1
results: to the handler, or (APPEND_DIRECT, PUT) answered to the client's
processor once the round's log ends are published (a PUT of PRODUCE v1 in
version 1's layout, its throttle time 0: the processor sends only
connections without a quota this way).
"""

from __future__ import annotations

import sys
import time

from hostbroker.errors import ErrorCode, HostbrokerError, StorageError
from hostbroker.log import message as logmsg
from hostbroker.log.partition import PartitionLog
from hostbroker.protocol import api, throttled
from hostbroker.protocol.lone import encode_lone_produce_answer
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.flusher import Waiter


class Appends:
    """Mixin of :class:`WriterWorker`: appends and their acks=1 answers."""

    def _append(self, h: int, m, out: list, touched: set[int]) -> None:
        a = env.decode_append(m)
        if a.stamp_ns:
            self.wait_ns += time.monotonic_ns() - a.stamp_ns
        self._append_set(h, a, out, touched)
        if a.ref is not None:
            # whatever came of it, we are done with the bytes its handler holds
            # (told with this round's results, acks=-1 before its flush)
            out.append((env.REF_DONE.pack(env.OP_REF_DONE, a.token, a.index),))

    def _append_set(self, h: int, a: env.Append, out: list, touched: set[int]) -> None:
        token, slot, index = a.token, a.slot, a.index
        if self.offline:
            self._result(h, a, ErrorCode.STORAGE_ERROR, -1, -1, out)
            return
        plog = self.slots.get(slot) or self._adopt(slot)
        if plog is None or plog.partition != a.partition or plog.topic != a.topic:
            # gone, or deleted since the handler routed it (its slot maybe re-used)
            s = self.table.read(slot)
            code = (ErrorCode.STORAGE_ERROR if s.state == ptable.OFFLINE and
                    (s.name, s.partition) == (a.topic, a.partition)
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            self._result(h, a, code, -1, -1, out)
            return
        refused = self._refusal(slot, plog, a.acks)  # a replica that does not lead, too few ISR
        if refused is not None:
            self._result(h, a, refused, -1, -1, out)
            return
        data = a.message_set
        ref = a.ref
        if ref is not None:
            # the set is in the request ring its handler holds for us
            if not self._holder_lives(h, ref):
                self._result(h, a, ErrorCode.UNKNOWN, -1, -1, out)
                return
            data = self.request_rings[h][ref.processor].view_at(ref.offset, ref.length)
        try:
            base, end = plog.append(data, a.count)
        except (OSError, StorageError) as e:
            self._go_offline(e)
            self._result(h, a, ErrorCode.STORAGE_ERROR, -1, -1, out)
            return
        if ref is not None and not self._holder_lives(h, ref):
            self._cut_torn(slot, plog, base)
            self._result(h, a, ErrorCode.UNKNOWN, -1, -1, out)
            return
        if ref is not None:
            self.count(procs.RING_APPENDS)
        touched.add(slot)
        self.appended += a.count  # counted once published (see _cycle)
        self.count(procs.BYTES_IN, len(data))
        self.stats.appended(slot, a.count, len(data))
        if a.acks == -1:
            self.waiters.append(Waiter(h, token, index, slot, plog, base, end, a.deadline_ms))
        elif a.acks != 0:
            self._result(h, a, ErrorCode.NONE, base, end, out)

    def _put(self, m, touched: set[int]) -> None:
        """A lone PRODUCE a processor sent past the handler (a PUT): check its
        set as a handler would (every entry, against the partition's
        ``max.message.bytes``), append it, and answer the processor with this
        round's direct answers."""
        a = env.decode_append(m)
        if a.stamp_ns:
            self.wait_ns += time.monotonic_ns() - a.stamp_ns
        plog = None if self.offline else (self.slots.get(a.slot) or self._adopt(a.slot))
        if plog is not None and (plog.topic, plog.partition) == (a.topic, a.partition):
            try:
                count = logmsg.validate_message_set(a.message_set, plog.config.max_message_bytes)
            except HostbrokerError as e:
                self.count(procs.ERRORS)
                self.direct.append((None, a, e.code, -1, -1))
                return
            if count == 0:
                # nothing to append, but a replica that does not lead says so
                # as it would of a non-empty set
                refused = self._refusal(a.slot, plog, 1)
                end = plog.log_end_offset
                self.direct.append((None, a, ErrorCode.NONE, end, end) if refused is None
                                   else (None, a, refused, -1, -1))
                return
            a = a._replace(count=count)
        # (offline, or the partition gone: _append_set answers why)
        self._append_set(None, a, [], touched)

    def _holder_lives(self, h: int, ref: env.Ref) -> bool:
        """Whether handler ``h``, which sent ``ref``, still holds its bytes.

        The supervisor marks a dead handler EXITED before it resets the rings
        that handler read, and only then lets the processors reuse them; so
        bytes copied out before this returns True were the ones it held (one
        process's loads are not reordered, and ``write()`` copies before it
        returns)."""
        slot = self.handler_slots[h]
        board = self.board
        return board.epoch(slot) == ref.handler_epoch and board.state(slot) != procs.WORKER_EXITED

    def _cut_torn(self, slot: int, plog: PartitionLog, base: int) -> None:
        """Cut an append whose handler died while it was written (its ring may
        have been reused under the write): nothing of it was published or
        answered. A flush of the partition still in flight is waited for first,
        so its end cannot mark the new bytes at those offsets durable."""
        self.count(procs.ERRORS)
        print(f"hostbroker: {self.name}: the handler of an append to "
              f"{plog.topic}-{plog.partition} died while it was written; cut it at {base}",
              file=sys.stderr, flush=True)
        while self.flushing.get(slot) is plog:
            time.sleep(0.001)
            self._flushed()
        try:
            plog.truncate_to(base)
        except (OSError, StorageError) as e:
            self._go_offline(e)

    def _result(self, h: int, a: env.Append, code: int, base: int, end: int, out: list) -> None:
        """The result of an acks=1 append: to its handler, or (an APPEND_DIRECT)
        kept to be answered to the client's processor once this round's log ends
        are published (:meth:`_answer_direct`)."""
        if a.direct is not None:
            self.direct.append((h, a, code, base, end))
        else:
            out.append((env.APPEND_RESULT.pack(env.OP_APPEND, a.token, a.index, code, base, end),))

    def _answer_direct(self, results: list[list]) -> None:
        """Answer this round's APPEND_DIRECTs to their processors, then tell
        each handler which were answered (OP_APPEND_DIRECT: it forgets them).
        One that does not go into its answer ring at once (full, or an answer
        over ``response.max.bytes``) goes back to its handler as a plain result,
        which the handler answers: nothing waits in this process for a
        processor, and a handler hears of a direct answer only once it is in
        the ring, so a writer that dies between the two leaves the handler
        answering it once more (the processor drops the second answer)."""
        woken = set()
        for h, a, code, base, end in self.direct:
            d = a.direct
            frame, failed = encode_lone_produce_answer(d.correlation_id, a.topic, a.partition,
                                                       code, base, end, self.max_response_bytes)
            if h is None:
                # a PUT: no handler to fall back on; what the ring cannot take
                # now waits in its sender (pumped by _pump, in order). Its
                # PRODUCE's version is the append's index.
                if a.index == throttled.PRODUCE_V1 and not failed:
                    frame = throttled.produce_v1_frame(frame)
                    failed = len(frame) > self.max_response_bytes
                pieces, flags = [frame], 0
                if failed:
                    pieces = [api.encode_error_frame(d.correlation_id, ErrorCode.INVALID_REQUEST)]
                    flags = env.RESP_CLOSE_AFTER
                if code or failed:
                    self.stats.error(api.ApiKey.PRODUCE)
                message = env.encode_response(d.conn_id, d.seq, flags, pieces, time.monotonic_ns())
                ring = self.answer_rings[d.processor]
                if not ring.try_send(*message):
                    ring.send(*message)
                woken.add(d.processor)
                self.count(procs.REQUESTS)
                continue
            op = env.OP_APPEND
            if not failed and self.answer_rings[d.processor].try_send(*env.encode_response(
                    d.conn_id, d.seq, 0, [frame], time.monotonic_ns())):
                op = env.OP_APPEND_DIRECT
                woken.add(d.processor)
                self.count(procs.REQUESTS)
                if code:  # (else its handler answers it, and counts it)
                    self.stats.error(api.ApiKey.PRODUCE)
            results[h].append((env.APPEND_RESULT.pack(op, a.token, a.index, code, base, end),))
        self.direct = []
        for p in woken:
            self.processor_bells[p].wake()
