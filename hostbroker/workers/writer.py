"""The writer process: one per log dir (disk), ``hb-writer-N``.

Owns: every partition log of its log dir, the only process that writes their
segment files. (The consumer groups and offsets are not here: they are
``hb-coordinator``'s, :mod:`hostbroker.workers.coordinator`, so no group
request delays an append.)
Reads: append rings from every handler (appends, topic deletions, long
polls, topic changes), put rings from every processor (lone PRODUCEs that
no handler saw: checked here as a handler would, appended, answered to the
processor), and the request rings of every processor to every
handler, for the large message sets a handler names there instead of
copying them (APPEND_REF; appended only while that handler lives, see
``_holder_lives``). Writes: result rings back to every handler, answer
rings to every processor (a PRODUCE of one partition with acks=1 is answered
from here, once its log end is published, one process crossing fewer than
through the handler; see ``_answer_direct``), and the partition table slots
it owns (log start/end offsets, flushed offset, segment generation, state),
which handlers read lock-free to answer fetches.

Loop: drain every append ring, append each message set with one ``write()``,
publish the new log end offsets, then answer acks=1 at once and acks=-1 after
the flush that follows (group commit: one ``fdatasync`` per touched partition
per batch, never per message). Flushes, whether due by the flush policy
(``flush.messages``, ``flush.ms``) or asked for by acks=-1, run in the
writer's flusher thread, so appends go on while the disk catches up; the
flushed offset is published when the fdatasync returns. Retention runs from
the same loop. After each batch that appended, as soon as its log ends are
published (before its answers), every processor and handler that sleeps
with fetches parked is woken so they see the new data (an awake one looks
at its parked fetches anyway before it sleeps; see ``handler._has_input``).

Appends and their acks=1 answers are in ``writer_appends.py``, the long-poll
FETCHes handlers park here (POLLs, answered to the processors once appends
bring their data) in ``writer_polls.py``; deletes come
through the same rings (retention, checkpoints and deletes:
``writer_cleanup.py``). Replicas of replicated topics (cluster mode: their
role, ISR and high watermark, the appends and truncations ``hb-replica``
brings on the ``rapp`` ring, and the refusal of a non-leader's appends) are
``writer_replicas.py`` (its follower side ``writer_follower.py``). The
writer is the only process that writes a slot it serves, so it marks the
slot DELETING itself; it then drops
all it holds for the slot (appends, flushes, acks=-1 waiters, which are
answered then) before freeing it, and refuses an append whose slot no longer
holds the partition it names (docs/storage.md).

At start the writer opens its log dir (recovering segments unless the clean
shutdown marker is there) and registers its partitions in the table. When it
replaces a writer that died, the table still holds the offsets that writer had
published; bytes past them were never acknowledged and are cut off.

A write or flush that fails with an OSError takes this log dir offline: its
partitions turn OFFLINE and answer STORAGE_ERROR; other disks keep serving.
Damage found at start does the same for less: a partition whose files cannot
be opened is registered OFFLINE alone, and a log dir that cannot be used at
all leaves this writer running with every partition it can name OFFLINE (the
table's offline log dir flag keeps new partitions away); only another broker
holding the log dir stops the start. A partition dir the file system refuses
to delete is logged once, stays DELETING and is retried at every retention
check, without stopping the writer.
"""

from __future__ import annotations

import errno
import os
import sys
import time

from hostbroker.errors import ErrorCode, HostbrokerError, StorageError
from hostbroker.log.logdir import LogDir, LogDirInUseError
from hostbroker.log.partition import PartitionLog
from hostbroker.log.segments import partition_dirname
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.partitions import PartitionTable
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import Worker, now_ms
from hostbroker.workers.flusher import Flusher, Waiter
from hostbroker.workers.writer_appends import Appends
from hostbroker.workers.writer_cleanup import Cleanup
from hostbroker.workers.writer_follower import Following
from hostbroker.workers.writer_hw import HighWatermarks
from hostbroker.workers.writer_local import LocalFollow
from hostbroker.workers.writer_polls import Polls
from hostbroker.workers.writer_replicas import Replicas
from hostbroker.workers.writer_startup import Startup

# results a sleeping handler is not woken for (see _pump)
_QUIET_OPS = frozenset((env.OP_APPEND_DIRECT, env.OP_REF_DONE, env.OP_POLL_DONE))


class WriterWorker(Appends, Polls, Replicas, HighWatermarks, Following, LocalFollow, Startup,
                   Cleanup, Worker):
    kind = "writer"
    process_name = "hb-writer"

    def init_process(self) -> None:
        super().init_process()
        self.path = self.plan.log_dirs[self.index]
        self.defaults = self.config.log_defaults()
        self.table = PartitionTable.attach(self.plan.table_name)
        self.lock = AdminLock.attach(self.plan.admin_lock_key,
                                     self.config["admin.lock.timeout.ms"] / 1000)
        self.receivers = [self.receiver("app", h, self.index) for h in range(self.plan.num_handlers)]
        self.senders = [self.sender("res", self.index, h) for h in range(self.plan.num_handlers)]
        self.handler_doorbells = [self.waker("handler", h) for h in range(self.plan.num_handlers)]
        self.handler_slots = [self.plan.board_slot("handler", h)
                              for h in range(self.plan.num_handlers)]
        # answers of APPEND_DIRECTs, straight to the client's processor
        self.answer_rings = [self.sender("ans", self.index, p)
                             for p in range(self.plan.num_processors)]
        # lone PRODUCEs processors send past the handlers (PUTs), checked and answered here
        self.puts = [self.receiver("put", p, self.index) for p in range(self.plan.num_processors)]
        self.processor_bells = [self.waker("processor", p)
                                for p in range(self.plan.num_processors)]
        # who may hold fetches waiting for data (FETCH_PARKED on the board):
        # processors (processor.local.fetch), which answer the client, first
        self.fetch_holders = (
            list(zip(self.processor_bells, (self.plan.board_slot("processor", p)
                                            for p in range(self.plan.num_processors))))
            + list(zip(self.handler_doorbells, self.handler_slots)))
        self.direct: list[tuple] = []  # (handler, Append, code, base, end) of this round
        self._init_polls()  # long polls held here (writer_polls)
        # the request rings (processor -> handler) that APPEND_REFs name, by handler
        self.request_rings = [[self._attach("req", p, h) for p in range(self.plan.num_processors)]
                              for h in range(self.plan.num_handlers)]
        self.waiters_answered: set[int] = set()  # handlers sent acks=-1 answers this round
        self.max_response_bytes = self.config["response.max.bytes"]
        self.offline = False
        self.appended = 0  # messages appended in this round, not yet on the board
        self.slots: dict[int, PartitionLog] = {}
        self.published: dict[int, tuple] = {}  # slot -> what the table last got
        self.dirty: set[int] = set()  # slots with unflushed data
        self.waiters: list[Waiter] = []
        self.flushing: dict[int, PartitionLog] = {}  # slot -> its log being flushed
        self.undeletable: dict[int, tuple[str, int]] = {}  # slot -> partition, delete retried
        self.retention_stuck: set[int] = set()  # slots with a segment retention cannot delete
        self.logdir = self._open_log_dir()
        self._init_replicas()  # replicas of replicated topics (writer_replicas)
        self._init_local()  # replicas across log dirs, the dir probe (writer_local)
        self.flusher = Flusher(self.doorbell)
        self._register_partitions()
        self.next_retention_ms = now_ms() + self.config["log.retention.check.interval.ms"]
        self.next_checkpoint_ms = now_ms() + self.config["log.flush.offset.checkpoint.interval.ms"]
        if self.logdir is not None and self.logdir.recovery_stats.partitions:
            print(f"hostbroker: {self.name} {self.logdir.recovery_stats.line(self.path)}",
                  file=sys.stderr, flush=True)
        self.flusher.start()
        self.board.set_state(self.slot, procs.WORKER_READY)

    # -- start-up ----------------------------------------------------------
    def _open_log_dir(self) -> LogDir | None:
        """Open (and recover) our log dir; None, and this writer offline, when it
        cannot be used at all. Another broker holding it stops the start."""
        try:
            return LogDir.open(self.path, self.defaults, now_ms)
        except LogDirInUseError:
            raise
        except StorageError as e:
            print(f"hostbroker: {self.name}: log dir {self.path} is offline: {e}",
                  file=sys.stderr, flush=True)
            self.offline = True
            self.count(procs.ERRORS)
            return None

    def _adopt(self, slot: int) -> PartitionLog | None:
        """Open a partition a handler created in our log dir since we started."""
        s = self.table.read(slot)
        if self.logdir is None or s.owner != self.index or \
                s.state not in (ptable.ONLINE, ptable.CREATING):
            return None
        path = os.path.join(self.path, partition_dirname(s.name, s.partition))
        try:
            plog = PartitionLog.open(path, self.defaults, now_ms, recover=False)
        except (OSError, HostbrokerError):
            return None
        try:
            replication = self._open_book(slot, plog, s) if plog.replicated else {}
        except (OSError, HostbrokerError):
            plog.close(flush=False)
            return None
        self.slots[slot] = plog
        self.logdir.partitions[(s.name, s.partition)] = plog
        self._publish(slot, plog, state=ptable.ONLINE, **replication)
        return plog

    # -- table -------------------------------------------------------------
    def _publish(self, slot: int, plog: PartitionLog, **extra) -> None:
        """Write the slot's offsets; bump its segment generation when the segment
        list changed. The generation only ever grows, across writer restarts too,
        since handlers keep segment lists cached by it."""
        bases = plog.segment_bases
        shape = (plog.log_start_offset, bases[-1], len(bases))
        old = self.published.get(slot)
        if old is None:  # first publish by this process: continue from the table
            gen = self.table.read(slot).segment_generation + 1
        else:
            gen = old[1] + 1 if old[0] != shape else old[1]
        if extra:
            self.table.write(slot, start_offset=plog.log_start_offset,
                             end_offset=plog.log_end_offset, flushed_offset=plog.flushed_offset,
                             segment_generation=gen, **extra)
        else:
            self.table.write_offsets(slot, plog.log_start_offset, plog.log_end_offset,
                                     plog.flushed_offset, gen)
        self.published[slot] = (shape, gen)

    def _go_offline(self, error: BaseException) -> None:
        print(f"hostbroker: log dir {self.path} failed ({error}); its partitions are offline",
              file=sys.stderr, flush=True)
        self.offline = True
        for slot in self.slots:
            self.table.write(slot, state=ptable.OFFLINE)
        try:
            with self.lock:
                self.table.set_log_dir_offline(self.index)
        except TimeoutError:
            self.table.set_log_dir_offline(self.index)  # placement is only a hint
        self.count(procs.ERRORS)
        self._ring_logdirs()  # hb-logdirs moves the leaderships away

    # -- the loop ----------------------------------------------------------
    def run(self) -> None:
        self.serve_rings()
        self.flusher.stop()
        self._flushed()
        for slot in list(self.dirty):
            plog = self.slots.get(slot)
            if plog is not None and not self.offline:
                try:
                    plog.flush()
                except (OSError, StorageError) as e:
                    self._go_offline(e)
                    break
                self._publish(slot, plog)
        self._answer_waiters(force=True)
        results: list[list] = [[] for _ in self.senders]
        self._answer_polls(results, now_ms(), force=True)
        for h, out in enumerate(results):
            for parts in out:
                self.senders[h].send(*parts)
        self._pump()
        self._shutdown()

    def _timeout(self) -> float:
        now = now_ms()
        deadline = now + 1000
        for slot in self.dirty:
            plog = self.slots.get(slot)
            if plog is not None:
                deadline = min(deadline, plog.next_flush_deadline_ms() or deadline)
        deadline = min(deadline, self.next_retention_ms, self.next_checkpoint_ms)
        if any(s.pending() for s in self.senders) or any(s.pending() for s in self.answer_rings):
            deadline = min(deadline, now + 10)
        polls_ms = self._polls_timeout_ms()
        if polls_ms is not None:
            deadline = min(deadline, polls_ms)
        for due in (self._replicas_timeout_ms(), self._local_timeout_ms()):
            if due is not None:
                deadline = min(deadline, due)
        return max(0.0, (deadline - now) / 1000)

    def _cycle(self) -> None:
        self._flushed()
        results: list[list] = [[] for _ in self.senders]
        touched: set[int] = set()
        for h, receiver in enumerate(self.receivers):
            if not receiver.has_unread():
                continue  # nothing taken since its last done(): nothing to free either
            messages = receiver.poll()
            for m in messages:
                op, token = env.decode_op(m)
                if op in env.APPEND_OPS:
                    self._append(h, m, results[h], touched)
                elif op == env.OP_DELETE:
                    results[h].append(env.encode_json(env.OP_DELETE, token,
                                                      self._delete(env.decode_json(m))))
                elif op == env.OP_ALTER_TOPIC:
                    results[h].append(env.encode_json(env.OP_ALTER_TOPIC, token,
                                                      self._alter(env.decode_json(m))))
                elif op == env.OP_REF_SYNC:
                    results[h].append((bytes(m),))  # back as it came, after what came before
                elif op == env.OP_POLL:
                    self._take_poll(h, m, results[h])
                elif op == env.OP_FOLLOWER_POS:
                    self._follower_pos(m)
                elif op == env.OP_REPLICA_STATE:
                    results[h].append(env.encode_json(env.OP_REPLICA_STATE, token,
                                                      self._replica_state(env.decode_json(m))))
            if receiver.done():
                self.handler_doorbells[h].ring()  # it waits for space: always ring
        for p, receiver in enumerate(self.puts):
            if not receiver.has_unread():
                continue
            for m in receiver.poll():
                self._put(m, touched)
            if receiver.done():
                self.processor_bells[p].ring()  # it waits for space: always ring
        self._serve_replica_ring(touched)  # what followers fetched from their leaders
        self._serve_logdirs_ring()  # roles from hb-logdirs
        self._follow_local(touched)  # what dir-placed followers copied from their leaders
        for slot in touched:
            plog = self.slots.get(slot)
            if plog is None:
                continue  # deleted after its appends in this same batch
            self._publish(slot, plog)
            self.dirty.add(slot)
        # replicas' ISR and high watermarks, after the log ends they cover are published
        if self.books:
            self._local_positions(now_ms(), touched)
        hw_moved = self._replicas_round(now_ms(), touched) if self.books else set()
        if self.appended:
            # after the table has the new log ends: a handler that sees this
            # counter move sees them too (handler._has_input)
            self.count(procs.MESSAGES_IN, self.appended)
            self.appended = 0
        if touched or hw_moved:
            # processors and handlers asleep with fetches parked see the new
            # data now, before this round's answers and flushes are dealt with
            board = self.board
            for bell, slot in self.fetch_holders:
                bell.wake(lambda: board.get(slot, procs.FETCH_PARKED))  # noqa: B023 - called at once
        now = self._answer_round(results, touched | hw_moved)
        due = [s for s in self.dirty if s in self.slots and
               (self.slots[s].flush_due(now) or any(w.slot == s for w in self.waiters))]
        if due:
            self._flush(due)
        if now >= self.next_retention_ms:
            self._retention(now)
        if now >= self.next_checkpoint_ms:
            self._checkpoint(now)
        self._probe_dir(now)
        quiet = set()
        for h, out in enumerate(results):
            for parts in out:
                self.senders[h].send(*parts)
            if out and all(len(parts) == 1 and parts[0][0] in _QUIET_OPS for parts in out):
                quiet.add(h)  # it takes these when it next wakes
        self._answer_waiters()
        self._pump(quiet - self.waiters_answered)
        self.waiters_answered.clear()

    def _answer_round(self, results: list[list], touched: set[int]) -> int:
        """Answer what this round's published log ends settle, straight to the
        clients' processors, and return the time it was done at (ms).

        Both after the publish: held polls read the log ends, and a PUT's
        answer says its data can be fetched. Polls first: the consumers'
        processors are woken before this process builds the producers'
        answers, so a message reaches its consumer without waiting behind its
        own acknowledgement."""
        now = now_ms()
        self._answer_polls(results, now, touched)
        if self.direct:
            self._answer_direct(results)
        return now

    def _flush(self, slots) -> None:
        """Start flushes of ``slots`` in the flusher thread (one at a time per slot)."""
        for slot in slots:
            plog = self.slots.get(slot)
            if plog is None:
                self.dirty.discard(slot)
                continue
            if slot in self.flushing:
                continue  # the next one starts when this one is done
            try:
                job = plog.flush_begin()
            except (OSError, StorageError) as e:
                self._go_offline(e)
                return
            if job is None:
                self.dirty.discard(slot)
                continue
            self.flushing[slot] = plog
            self.flusher.jobs.put((slot, plog, *job))

    def _flushed(self) -> None:
        """Take the flushes the flusher thread finished: publish, then answer acks=-1.

        A flush of a partition deleted since it began is dropped, error and
        all: its data and its waiters are gone, and its slot may already hold
        a new partition (of the same topic, re-created), which it must not
        touch."""
        finished = self.flusher.done
        done = False
        while not finished.empty():  # (only this thread takes from it)
            slot, plog, offset, error = finished.get_nowait()
            done = True
            if self.flushing.get(slot) is plog:
                del self.flushing[slot]
            if self.slots.get(slot) is not plog:
                continue
            if error is not None:
                self._go_offline(error)
                continue
            plog.flush_end(offset)
            if plog.flushed_offset >= plog.log_end_offset:
                self.dirty.discard(slot)
            self.count(procs.FLUSHES)
            self._publish(slot, plog)
        if done:
            self._answer_waiters()
            self._pump()

    def _answer_waiters(self, force: bool = False) -> None:
        if not self.waiters:
            return
        now = now_ms()
        keep = []
        for w in self.waiters:
            # flushed, and for a replica the high watermark past it too
            code = self._waiter_code(w) if w.plog.flushed_offset >= w.end else None
            if code is not None:
                self._answer_waiter(w, code)
            elif self.slots.get(w.slot) is not w.plog:
                self._answer_waiter(w, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif self.offline:
                self._answer_waiter(w, ErrorCode.STORAGE_ERROR)
            elif force or now >= w.deadline_ms:
                self._answer_waiter(w, ErrorCode.REQUEST_TIMED_OUT)
            else:
                keep.append(w)
        self.waiters = keep

    def _answer_waiter(self, w: Waiter, code: ErrorCode) -> None:
        """Answer an acks=-1 append: its offsets on success, -1 with an error."""
        base, end = (w.base, w.end) if code == ErrorCode.NONE else (-1, -1)
        self.waiters_answered.add(w.handler)
        self.senders[w.handler].send(
            env.APPEND_RESULT.pack(env.OP_APPEND, w.token, w.index, code, base, end))

    def _pump(self, quiet: set[int] = frozenset()) -> None:
        """Move queued results into the rings and wake the handlers that sleep,
        but those in ``quiet``: a handler need not wake to hear that a writer
        answered for it (it forgets the request when it next comes round) or is
        done with bytes it holds (a processor that needs that ring space finds
        the ring full and wakes it); its result ring filling up would ring it
        all the same."""
        for h, sender in enumerate(self.senders):
            if sender.pending():
                sender.pump()
                if h not in quiet:
                    self.handler_doorbells[h].wake()
        for p, sender in enumerate(self.answer_rings):
            if sender.pending():  # PUT answers their ring could not take at once
                sender.pump()
                self.processor_bells[p].wake()
        self._pump_replica()

    def _shutdown(self) -> None:
        self._checkpoint_hws()
        try:
            if self.logdir is not None:
                self.logdir.close()
        except OSError as e:
            if e.errno != errno.EIO:
                raise
        # leave a moment for handlers to read the last answers
        deadline = time.monotonic() + 1
        while any(s.pending() for s in self.senders) and time.monotonic() < deadline:
            self._pump()
            time.sleep(0.01)
