"""What a follower replica takes from its leader (part of ``hb-writer-N``).

Mixed into :class:`~hostbroker.workers.writer.WriterWorker` beside
:class:`~hostbroker.workers.writer_replicas.Replicas`, which owns the
replicas' books (role, leader epoch, ISR, HW), their role changes and the
leader side. This module owns the follower side: what hb-replica brings
from the leaders on the ``rapp`` ring, answered on ``rres``:

- OP_REPLICA_APPEND: the leader's bytes at the same offsets, appended only
  to a FOLLOWER in the leader epoch named, at its log end, whole entries
  checked as a produce is; the leader epoch cache follows the data's epoch,
  and the HW follows the leader's (never past our log end);
- OP_TRUNCATE: the log (and its epoch cache) cut where it diverged from the
  leader's, at an entry boundary;
- OP_RESTART_LOG: the log emptied and started at the leader's log start,
  when that is past our log end (the HW checkpointed at once).

Each waits for a flush of the slot in flight before it cuts, and takes the
log dir offline when the disk fails.
"""

from __future__ import annotations

import sys
import time

from hostbroker.errors import ErrorCode, HostbrokerError, StorageError
from hostbroker.log import message as logmsg
from hostbroker.log.epochs import MAX_OFFSET
from hostbroker.log.partition import PartitionLog
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.writer_replicas import FENCED_LEADER_EPOCH, NOT_LEADER, StateError

# A copy's entries are checked whole (format, CRC) but only against the int32
# bound of an entry's length: the leader took each under its produce limit of
# the time, which an ALTER_TOPIC may have lowered since
COPY_MAX_ENTRY_BYTES = 2**31 - 1


class Following:
    """Mixin of :class:`WriterWorker`: a follower's appends, truncations and
    log restarts from its leader (the books are :class:`Replicas`')."""

    def _serve_replica_ring(self, touched: set[int]) -> None:
        """What hb-replica brought from the leaders, answered on ``rres``."""
        receiver = self.rapp
        if receiver is None or not receiver.has_unread():
            return
        for m in receiver.poll():
            op, token = env.decode_op(m)
            if op == env.OP_REPLICA_APPEND:
                self.rres.send(self._replica_append(m, touched))
            elif op == env.OP_TRUNCATE:
                self.rres.send(*env.encode_json(env.OP_TRUNCATE, token,
                                                self._truncate(env.decode_json(m))))
            elif op == env.OP_RESTART_LOG:
                self.rres.send(*env.encode_json(env.OP_RESTART_LOG, token,
                                                self._restart_log(env.decode_json(m))))
        receiver.done()
        self.rres.pump()
        self.replica_bell.wake()

    def _replica_append(self, m, touched: set[int]) -> bytes:
        """Append the leader's bytes at the same offsets: only to a FOLLOWER in
        the leader epoch named, at its log end, whole entries checked as a
        produce is. The answer says the log end either way."""
        a = env.decode_replica_append(m)
        book = self.books.get(a.slot)
        plog = book.plog if book is not None else None
        if self.offline:
            return env.encode_replica_append_result(a.token, ErrorCode.STORAGE_ERROR, -1)
        if (plog is None or self.slots.get(a.slot) is not plog
                or (plog.topic, plog.partition) != (a.topic, a.partition)):
            return env.encode_replica_append_result(a.token, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                    -1)
        end = plog.log_end_offset
        if book.role != ptable.ROLE_FOLLOWER or a.leader_epoch != book.leader_epoch:
            code = FENCED_LEADER_EPOCH if a.leader_epoch < book.leader_epoch else NOT_LEADER
            return env.encode_replica_append_result(a.token, code, end)
        if a.base_offset != end:
            return env.encode_replica_append_result(a.token, ErrorCode.OFFSET_OUT_OF_RANGE, end)
        try:
            # the leader's data, each entry as its produce limit then took it: a
            # limit lowered since (here or there) must not refuse the older entries
            count = logmsg.validate_message_set(a.message_set, COPY_MAX_ENTRY_BYTES)
        except HostbrokerError as e:
            self.count(procs.ERRORS)
            return env.encode_replica_append_result(a.token, e.code, end)
        if count:
            epochs = book.epochs
            try:
                if 0 <= a.data_epoch < epochs.latest_epoch and epochs.latest_start >= end:
                    # our newest epochs hold no message (we led them and wrote
                    # nothing): the leader's older epoch goes on past them
                    epochs.truncate_from_end(end)
                if a.data_epoch > epochs.latest_epoch:
                    epochs.assign(a.data_epoch, end)
            except (OSError, StorageError) as e:
                self._go_offline(e)
                return env.encode_replica_append_result(a.token, ErrorCode.STORAGE_ERROR, -1)
            try:
                _, end = plog.append(a.message_set, count)
            except (OSError, StorageError) as e:
                self._go_offline(e)
                return env.encode_replica_append_result(a.token, ErrorCode.STORAGE_ERROR, -1)
            touched.add(a.slot)
            self.replica_appended += count
            self.count(procs.BYTES_IN, len(a.message_set))
        hw = max(plog.log_start_offset, min(a.leader_hw, end))  # (a HW below the start: at it)
        if hw != book.hw:
            book.hw = hw
            self.table.write(a.slot, high_watermark=hw)
        return env.encode_replica_append_result(a.token, ErrorCode.NONE, end)

    def _truncate(self, request) -> dict:
        """Cut a follower's log at ``offset`` (where it diverged from its
        leader's), its leader epoch cache with it; at the last entry boundary
        at or below ``offset`` when that falls inside an entry (the offset
        comes from the leader's answers: a replica never keeps a torn entry,
        and fetches again what the cut took). The answer's ``log_end`` says
        where the log now ends."""
        checked = self._follower_op(request, "truncate")
        if isinstance(checked, dict):
            return checked
        slot, offset, plog, book = checked
        if offset >= plog.log_end_offset:
            return {"error": 0, "log_end": plog.log_end_offset}
        if offset < plog.log_start_offset:
            return {"error": int(ErrorCode.OFFSET_OUT_OF_RANGE), "log_end": plog.log_end_offset,
                    "message": f"{offset} is below the log start {plog.log_start_offset}"}
        try:
            return {"error": 0, "log_end": self._cut_to(slot, offset)}
        except StorageError as e:
            return {"error": int(ErrorCode.STORAGE_ERROR), "log_end": -1, "message": str(e)}

    def _cut_to(self, slot: int, offset: int) -> int:
        """The cut of :meth:`_truncate`, which a dir-placed follower's local
        truncation shares: the log and its leader epoch cache cut at the last
        entry boundary at or below ``offset`` (within the log), the HW and
        epoch start kept at or below it, published. Returns the log end.
        StorageError when the disk fails (the log dir is offline then)."""
        book = self.books[slot]
        plog = book.plog
        self._flush_settled(slot, plog)
        try:
            offset = plog.entry_floor(offset)
            plog.truncate_to(offset)
            book.epochs.truncate_from_end(offset)
        except (OSError, StorageError) as e:
            self._go_offline(e)
            raise StorageError(str(e)) from e
        book.hw = min(book.hw, offset)
        book.epoch_start = min(book.epoch_start, offset)
        self._publish(slot, plog, high_watermark=book.hw, epoch_start=book.epoch_start)
        return plog.log_end_offset

    def _restart_log(self, request) -> dict:
        """Empty a follower's log and start it at ``offset``, the log start its
        leader stated, past our log end (retention or a delete there removed
        what we lack): the leader epoch cache cleared first (a crash then
        leaves the old log without epochs, cut at its HW as a log written
        before replication is), then the segments (``PartitionLog.restart_at``:
        the old log or the new one, never neither), then the HW, checkpointed
        at once. Never moves a log back: an offset at or below the log end is
        refused OFFSET_OUT_OF_RANGE."""
        checked = self._follower_op(request, "log restart")
        if isinstance(checked, dict):
            return checked
        slot, offset, plog, book = checked
        if not plog.log_end_offset < offset <= MAX_OFFSET:
            return {"error": int(ErrorCode.OFFSET_OUT_OF_RANGE), "log_end": plog.log_end_offset,
                    "message": f"a restart at {offset} is not past the log end "
                               f"{plog.log_end_offset}"}
        try:
            return {"error": 0, "log_end": self._restart_at(slot, offset)}
        except StorageError as e:
            return {"error": int(ErrorCode.STORAGE_ERROR), "log_end": -1, "message": str(e)}

    def _restart_at(self, slot: int, offset: int) -> int:
        """The restart of :meth:`_restart_log` (``offset`` past the log end,
        checked by the caller), which a dir-placed follower shares. Returns
        the log end. StorageError when the disk fails (the log dir is offline
        then)."""
        book = self.books[slot]
        plog = book.plog
        self._flush_settled(slot, plog)
        try:
            book.epochs.clear()
            plog.restart_at(offset)
        except (OSError, StorageError) as e:
            self._go_offline(e)
            raise StorageError(str(e)) from e
        print(f"hostbroker: {self.name}: {plog.topic}-{plog.partition}: the leader's log "
              f"starts at {offset}, past this replica's end: its log starts there now",
              file=sys.stderr, flush=True)
        book.hw = book.epoch_start = offset
        self._publish(slot, plog, high_watermark=offset, epoch_start=offset)
        self._checkpoint_hws()
        return plog.log_end_offset

    def _follower_op(self, request, what: str):
        """``(slot, offset, log, book)`` of an OP_TRUNCATE or OP_RESTART_LOG
        for a FOLLOWER in the leader epoch it names, or the answer refusing it."""
        try:
            slot, offset = int(request["slot"]), int(request["offset"])
            plog = self._replica_log(slot, request["topic"], int(request["partition"]))
            book = self.books[slot]
            epoch = int(request["leader_epoch"])
            if book.role != ptable.ROLE_FOLLOWER or epoch != book.leader_epoch:
                raise StateError(NOT_LEADER if epoch >= book.leader_epoch
                                 else FENCED_LEADER_EPOCH, "not a follower in that epoch")
        except StateError as e:
            return {"error": e.code, "log_end": -1, "message": str(e)}
        except (KeyError, TypeError, ValueError) as e:
            return {"error": int(ErrorCode.INVALID_REQUEST), "log_end": -1,
                    "message": f"bad {what}: {e}"}
        return slot, offset, plog, book

    def _flush_settled(self, slot: int, plog: PartitionLog) -> None:
        """Wait for a flush of ``slot`` in flight: its end must not mark new bytes durable."""
        while self.flushing.get(slot) is plog:
            time.sleep(0.001)
            self._flushed()
