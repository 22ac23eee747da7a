"""The replicas of replicated topics a writer serves (part of ``hb-writer-N``).

Mixed into :class:`~hostbroker.workers.writer.WriterWorker`, whose partition
logs, table slots, rings and acks=-1 waiters it uses. Owns, for every
partition of its log dir that is a replica of a replicated topic
(``partition.json`` says ``"replicated": true``; docs/storage.md, "Replicas"):

- its *book* (:class:`ReplicaBook`): role, leader, leader epoch, replicas,
  the committed ISR and the one it wants, the high watermark (HW), its
  leader epoch cache (``leader-epoch-checkpoint``) and, while it leads, what
  it knows of its followers (an ``IsrTracker``);
- the role changes the handlers send on LEADER_AND_ISR and STOP_REPLICA
  (OP_REPLICA_STATE): a new leadership is saved in the epoch cache before the
  slot says so; leaving it answers the acks=-1 appends still waiting
  NOT_LEADER_FOR_PARTITION;
- the followers' fetch positions (OP_FOLLOWER_POS): the ISR it wants
  (``isr_wanted``, published for the registrar to write to ZooKeeper), the
  ISR commits it adopts (``IsrCommitTable``), and the HW, the smallest log
  end over the committed ISR and the followers it asks to join, which only
  grows while it leads. A move of the
  HW wakes the fetches parked on it, as an append does;
- the check that a request names a replica of ours (``_replica_log``) and
  the refusal it raises (:class:`StateError`), which the follower side
  shares: what hb-replica brings from the leader while a replica follows
  (OP_REPLICA_APPEND, OP_TRUNCATE, OP_RESTART_LOG) is ``writer_follower.py``'s;
- the refusals of every append path (APPEND*, PUT) for a replica that does
  not lead, and of acks=-1 with an ISR below ``min.insync.replicas``;
- the HW checkpoint of the log dir (``replication-offset-checkpoint``) and
  a leader's HW computation are ``writer_hw.py``'s;
- for a replica placed on one of this broker's log dirs, the same book with
  log dir ids for broker ids (``book.me``); its copy from the leader's files
  and the leader's view of its followers' slots are ``writer_local.py``'s;
- the board counters of replicas: ``replica_messages_in`` (what a follower
  appended, put on the board once a round) and ``hw_moves`` (a leader's HW
  moved; ``messages_in`` counts produced messages only).

Plain partitions (standalone, 0.7-style cluster topics) have no book and
none of this touches them.
"""

from __future__ import annotations

import sys

from hostbroker.errors import ErrorCode, HostbrokerError, StorageError
from hostbroker.log import hwcheckpoint
from hostbroker.log.epochs import LeaderEpochCache
from hostbroker.log.partition import PartitionLog
from hostbroker.replication.isr import IsrTracker
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.partitions import isr_bits, isr_members, replica_fields
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.flusher import Waiter


NOT_LEADER = ErrorCode.NOT_LEADER_FOR_PARTITION
NOT_ENOUGH_REPLICAS = ErrorCode.NOT_ENOUGH_REPLICAS
NOT_ENOUGH_REPLICAS_AFTER_APPEND = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
FENCED_LEADER_EPOCH = ErrorCode.FENCED_LEADER_EPOCH

ROLES_BY_NAME = {"leader": ptable.ROLE_LEADER, "follower": ptable.ROLE_FOLLOWER,
                 "stopped": ptable.ROLE_STOPPED}
_INT32 = range(-(2**31), 2**31)


class ReplicaBook:
    """What a writer holds for one replica of a replicated topic."""

    __slots__ = ("plog", "role", "leader", "leader_epoch", "replicas", "isr", "isr_version",
                 "isr_wanted", "hw", "epochs", "tracker", "min_isr", "epoch_start",
                 "commit_seq", "me", "placement", "replica_slots", "leader_slot", "fetch_epoch")

    def __init__(self, plog: PartitionLog, epochs: LeaderEpochCache, hw: int, me: int = -1,
                 placement: int = ptable.PLACEMENT_BROKERS):
        self.plog = plog
        # our own replica id: the broker id, or our log dir's id for a
        # replica placed on this broker's log dirs (writer_local.py)
        self.me = me
        self.placement = placement
        self.replica_slots: dict[int, int] = {}  # dir-placed: replica id -> its slot
        self.leader_slot = ptable.NO_SLOT  # dir-placed follower: the leader's slot
        self.fetch_epoch = -1  # dir-placed follower: the epoch its log was cut to the leader's in
        self.epochs = epochs
        self.role = ptable.ROLE_STOPPED
        self.leader = -1
        self.leader_epoch = max(0, epochs.latest_epoch)
        self.replicas: list[int] = []
        self.isr: tuple[int, ...] = ()  # committed (ZooKeeper holds it)
        self.isr_version = 0
        self.isr_wanted: tuple[int, ...] = ()
        self.hw = hw
        self.tracker: IsrTracker | None = None  # while leading
        self.min_isr = plog.config.min_insync_replicas
        self.epoch_start = max(0, epochs.latest_start)
        self.commit_seq = 0  # the ISR commit slot's seq when this leadership began

    def fields(self) -> dict:
        """The slot's replication fields as this book says."""
        return {"role": self.role, "leader": self.leader, "leader_epoch": self.leader_epoch,
                "isr_version": self.isr_version, "isr": isr_bits(self.replicas, self.isr),
                "isr_wanted": isr_bits(self.replicas, self.isr_wanted),
                "epoch_start": self.epoch_start, "high_watermark": self.hw,
                **replica_fields(self.replicas), "placement": self.placement,
                "fetch_epoch": self.fetch_epoch, "leader_slot": self.leader_slot}

    @property
    def dirs_placed(self) -> bool:
        return self.placement == ptable.PLACEMENT_LOG_DIRS


class StateError(Exception):
    """An OP_REPLICA_STATE or OP_TRUNCATE that cannot be done: ``code`` says why."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class Replicas:
    """Mixin of :class:`WriterWorker`: replicas, their ISR and high watermark.

    The class attributes are what a writer without replicas has (one built
    without :meth:`_init_replicas`, as tests do); they are never changed in
    place while empty."""

    books: dict[int, ReplicaBook] = {}
    leading: set[int] = frozenset()
    isr_pending: set[int] = frozenset()
    rapp = rres = replica_bell = None
    hw_checkpoint: bytes | None = None
    start_hws: dict = {}
    replica_appended = 0  # messages appended from leaders this round, not yet on the board

    # -- start-up ----------------------------------------------------------
    def _init_replicas(self) -> None:
        """Books and rings; before the partitions are registered."""
        self.broker_id = self.config["broker.id"]
        self.books: dict[int, ReplicaBook] = {}
        self.leading: set[int] = set()  # slots of the books that lead
        self.lag_ms = self.config["replica.lag.time.max.ms"]
        self.lag_bytes = self.config["replica.lag.max.bytes"]
        self.isr_check_ms = now_ms() + min(self.lag_ms, 1000)
        self.isr_pending: set[int] = set()  # leader slots whose ISR or HW may move this round
        self.hw_checkpoint: bytes | None = None  # what the file holds, as far as we know
        name = getattr(self.plan, "isr_commits_name", None)
        self.isr_commits = ptable.IsrCommitTable.attach(name) if name else None
        self.rapp = self.rres = self.replica_bell = None
        if getattr(self.plan, "replica", False):
            self.rapp = self.receiver("rapp", 0, self.index)
            self.rres = self.sender("rres", self.index, 0)
            self.replica_bell = self.waker("replica", 0)
        self.start_hws: dict = {}
        if self.logdir is not None:
            self.start_hws, problem = hwcheckpoint.read_high_watermarks(self.path)
            if problem:
                print(f"hostbroker: {self.name}: {problem}", file=sys.stderr, flush=True)

    def _open_book(self, slot: int, plog: PartitionLog, s) -> dict:
        """The book of a replicated partition registered in ``slot`` (``s``: the
        slot as the table had it, or None), and the slot fields to publish.

        A slot that was a replica's (a replaced writer, or a partition a handler
        created since) keeps its role, leader, epoch, replicas and ISR; after a
        start the replica is STOPPED with no leader until a LEADER_AND_ISR. The
        HW is the table's, or the checkpoint's, never past the log end. Raises
        StorageError for a bad leader epoch file (the partition is offline)."""
        epochs = LeaderEpochCache.load(plog.path)
        if epochs.latest_start > plog.log_end_offset:
            epochs.truncate_from_end(plog.log_end_offset)  # recovery cut the log
        known = s is not None and s.role != ptable.ROLE_PLAIN and \
            (s.name, s.partition) == (plog.topic, plog.partition)
        hw = s.high_watermark if known else self.start_hws.get((plog.topic, plog.partition), 0)
        # (never below the log start: a log restarted at its leader's start
        # may meet a checkpoint written before)
        book = ReplicaBook(plog, epochs,
                           max(plog.log_start_offset, min(hw, plog.log_end_offset)),
                           *self._replica_identity(plog))
        if known and book.dirs_placed:
            # always STOPPED at open (a replaced writer, a dir come back):
            # hb-logdirs gives the role again, so no stale leadership resumes
            book.leader_epoch = max(s.leader_epoch, book.leader_epoch)
            book.replicas = list(s.replicas)
            book.isr = isr_members(book.replicas, s.isr)
            book.isr_version = s.isr_version
        elif known:
            book.role, book.leader = s.role, s.leader
            book.leader_epoch = max(s.leader_epoch, book.leader_epoch)
            book.replicas = list(s.replicas)
            book.isr = isr_members(book.replicas, s.isr)
            book.isr_wanted = isr_members(book.replicas, s.isr_wanted)
            book.isr_version = s.isr_version
            book.epoch_start = s.epoch_start
            if book.role == ptable.ROLE_LEADER:
                book.tracker = self._new_tracker(slot, book)
                # a commit our predecessor had not adopted yet is still ours
                # (newer than the slot's isr_version, in its epoch); one of a
                # partition that had the slot before was cleared when it was claimed
                book.commit_seq = 0
                self.isr_pending.add(slot)
                self.leading.add(slot)
        self.books[slot] = book
        return book.fields()

    def _new_tracker(self, slot: int, book: ReplicaBook) -> IsrTracker:
        """The leader's view of its followers, each caught up as of now; ISR
        commits written before now are not this leadership's."""
        if self.isr_commits is not None:
            book.commit_seq = self.isr_commits.seq(slot)
        return IsrTracker(book.me, book.replicas, book.isr, now_ms())

    def _drop_book(self, slot: int) -> None:
        if slot in self.books:
            del self.books[slot]
            self.isr_pending.discard(slot)
            self.leading.discard(slot)
            self._local_forget(slot)

    # -- the append paths ----------------------------------------------------
    def _refusal(self, slot: int, plog: PartitionLog, acks: int) -> int | None:
        """Why an append to ``slot`` must be refused (nothing appended), or None:
        a replica that does not lead takes no produce; an acks=-1 one needs
        ``min.insync.replicas`` in the committed ISR. The one check of every
        append path (APPEND*, PUT)."""
        book = self.books.get(slot)
        if book is None or book.plog is not plog:
            return None if not plog.replicated else NOT_LEADER
        if book.role != ptable.ROLE_LEADER:
            return NOT_LEADER
        if acks == -1 and len(book.isr) < book.min_isr:
            return NOT_ENOUGH_REPLICAS
        return None

    def _waiter_code(self, w: Waiter) -> int | None:
        """How a flushed acks=-1 append of a replica is answered now, or None
        while it waits for the HW: NONE once the HW covers it (with the ISR at
        least ``min.insync.replicas``, else NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        book = self.books.get(w.slot)
        if book is None or book.plog is not w.plog:
            return ErrorCode.NONE
        if book.role != ptable.ROLE_LEADER:
            return NOT_LEADER
        if book.hw < w.end:
            return None
        if len(book.isr) < book.min_isr:
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _readable_end(self, slot: int, plog: PartitionLog) -> int:
        """Where a consumer's fetch stops: the HW of a replica, the log end else."""
        book = self.books.get(slot)
        if book is None or book.plog is not plog:
            return plog.log_end_offset
        return min(book.hw, plog.log_end_offset)

    def _serves_consumers(self, slot: int, plog: PartitionLog) -> bool:
        """A consumer fetch of ``slot`` may be answered here (not a follower's)."""
        book = self.books.get(slot)
        return book is None or book.role == ptable.ROLE_LEADER

    # -- OP_REPLICA_STATE ----------------------------------------------------
    def _replica_state(self, request) -> dict:
        """Take the role LEADER_AND_ISR or STOP_REPLICA gives a replica."""
        try:
            return self._replica_state_checked(request)
        except StateError as e:
            return {"error": e.code, "message": str(e)}
        except (KeyError, TypeError, ValueError, HostbrokerError) as e:
            return {"error": int(ErrorCode.INVALID_REQUEST), "message": f"bad replica state: {e}"}

    def _replica_state_checked(self, request) -> dict:
        slot, topic, partition = int(request["slot"]), request["topic"], int(request["partition"])
        if request.get("delete") is True:
            # STOP_REPLICA with delete: as DELETE_TOPIC does (an offline replica too)
            if not 0 <= slot < self.table.slot_count:
                raise ValueError(f"slot {slot} outside the table")
            return self._delete({"slot": slot, "topic": topic, "partition": partition})
        plog = self._replica_log(slot, topic, partition)
        role = ROLES_BY_NAME[request["role"]]
        epoch = int(request["leader_epoch"])
        leader = int(request.get("leader", -1))
        if epoch not in _INT32 or leader not in _INT32:
            raise ValueError("leader or leader_epoch outside int32")
        book = self.books[slot]
        if epoch < book.leader_epoch:
            raise StateError(FENCED_LEADER_EPOCH, f"{topic}-{partition}: leader epoch {epoch} "
                             f"is older than {book.leader_epoch}")
        replicas = list(request.get("replicas") or book.replicas)
        replica_fields(replicas)  # ValueError for a bad list
        isr = [r for r in request.get("isr", []) if r in replicas]
        # the topic's whole config (the controller's read of /config/topics, hb-logdirs'
        # document): a key not in it is removed; None (STOP_REPLICA): the replica keeps its own
        config = request.get("config")
        if config is not None and not isinstance(config, dict):
            raise ValueError("config is not an object")
        if config is not None:
            self.defaults.with_overrides(config)  # ConfigError: refused, nothing changed
        local = self._local_state(book, request)  # dir-placed keys (writer_local), checked
        if role == ptable.ROLE_LEADER and book.me not in replicas:
            raise ValueError(f"replica {book.me} leads but is not among replicas {replicas}")
        altered = False
        if config is not None:
            # in partition.json before it applies: a writer replaced after a crash reads it
            try:
                altered = plog.alter(self.defaults, config)
            except (OSError, StorageError) as e:
                self._go_offline(e)
                raise StateError(ErrorCode.STORAGE_ERROR,
                                 f"cannot record the topic config: {e}") from e
        # (whoever sent the state bumps the table's generation once it has the
        # answers, "altered" among them: no admin lock in this loop for it)
        min_isr = plog.config.min_insync_replicas
        was_leading = book.role == ptable.ROLE_LEADER
        isr_version = int(request.get("isr_version", book.isr_version))
        if was_leading and role == ptable.ROLE_LEADER and epoch == book.leader_epoch \
                and isr_version < book.isr_version:
            # an ISR older than one we had committed since, in the same epoch: ours stands
            isr, isr_version = list(book.isr), book.isr_version
        if role == ptable.ROLE_LEADER:
            if not was_leading or epoch != book.leader_epoch or replicas != book.replicas:
                # the new leadership is in the epoch file before the slot says so
                end = plog.log_end_offset
                if epoch > book.epochs.latest_epoch:
                    self._save_epoch(book, epoch, end)
                    book.epoch_start = end
                else:  # the epoch it led before a restart: its entry stands
                    book.epoch_start = min(max(0, book.epochs.latest_start), end)
                book.replicas = replicas
                book.tracker = self._new_tracker(slot, book)
            leader = book.me
            if book.me not in isr:
                isr.append(book.me)
        elif was_leading:
            book.tracker = None
            self._answer_waiters_of(slot, NOT_LEADER)
        if role != book.role or epoch != book.leader_epoch:
            book.fetch_epoch = -1  # a follower's log is cut to its leader's anew
        book.replicas = replicas
        book.role, book.leader, book.leader_epoch = role, leader, epoch
        self._local_take(slot, book, local)
        book.isr = tuple(r for r in replicas if r in isr)
        book.isr_wanted = book.isr
        if book.tracker is not None:
            book.tracker.set_isr(book.isr)
        book.isr_version = isr_version
        book.min_isr = min_isr
        book.hw = min(book.hw, plog.log_end_offset)
        self.table.write(slot, **book.fields())
        if role == ptable.ROLE_LEADER:
            self.isr_pending.add(slot)
            self.leading.add(slot)
        else:
            self.isr_pending.discard(slot)
            self.leading.discard(slot)
            self._polls_of_replica_back(slot)
        return {"error": 0, "altered": True} if altered else {"error": 0}

    def _replica_log(self, slot: int, topic: str, partition: int) -> PartitionLog:
        """The open log of replica ``topic``-``partition`` in ``slot``, its book ready."""
        if self.offline:
            raise StateError(ErrorCode.STORAGE_ERROR, f"log dir {self.path} is offline")
        if not 0 <= slot < self.table.slot_count:
            raise ValueError(f"slot {slot} outside the table")
        plog = self.slots.get(slot) or self._adopt(slot)
        if plog is None or (plog.topic, plog.partition) != (topic, partition):
            raise StateError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"no partition {topic}-{partition} in slot {slot}")
        if slot not in self.books:
            raise StateError(ErrorCode.INVALID_REQUEST,
                             f"{topic}-{partition} is not a replica of a replicated topic")
        return plog

    def _save_epoch(self, book: ReplicaBook, epoch: int, start: int) -> None:
        try:
            book.epochs.assign(epoch, start)
        except (OSError, StorageError) as e:
            self._go_offline(e)
            raise StateError(ErrorCode.STORAGE_ERROR, f"cannot save leader epoch: {e}") from e

    def _answer_waiters_of(self, slot: int, code: int) -> None:
        """Answer every acks=-1 append waiting on ``slot`` now, with ``code``."""
        keep = []
        for w in self.waiters:
            if w.slot == slot:
                self._answer_waiter(w, code)
            else:
                keep.append(w)
        self.waiters = keep

    def _polls_of_replica_back(self, slot: int) -> None:
        """Consumer long polls held for a replica that stopped leading go back
        to their handlers (which answer NOT_LEADER_FOR_PARTITION)."""
        held = self.polls.pop(slot, None) if hasattr(self, "polls") else None
        if not held:
            return
        self.polls_held -= len(held)
        self._show_polls()
        for h, poll in held:
            self.senders[h].send(env.encode_op(env.OP_POLL_BACK, poll.token))

    # -- OP_FOLLOWER_POS -----------------------------------------------------
    def _follower_pos(self, m) -> None:
        """A follower fetched at ``offset`` in our leader epoch: it holds everything below."""
        pos = env.decode_follower_pos(m)
        book = self.books.get(pos.slot)
        if (book is None or book.role != ptable.ROLE_LEADER or book.tracker is None
                or pos.leader_epoch != book.leader_epoch
                or (book.plog.topic, book.plog.partition) != (pos.topic, pos.partition)
                or pos.replica_id == book.me or pos.replica_id not in book.replicas):
            return  # stale (another epoch, a slot re-used) or not a follower of ours
        plog = book.plog
        offset = min(pos.offset, plog.log_end_offset)  # nobody holds more than we wrote
        book.tracker.fetched(pos.replica_id, offset, plog.log_end_offset, now_ms())
        self.isr_pending.add(pos.slot)

    # -- the round: ISR, commits, high watermark -------------------------------
    def _replicas_round(self, now: int, touched=()) -> set[int]:
        """After the round's log ends are published: for the leader slots whose
        followers moved, that appended (``touched``), or whose ISR check is
        due, adopt ISR commits, publish the ISR wanted, and move the HW.
        Returns the slots whose HW moved (their parked fetches look again)."""
        if self.replica_appended:  # published: a handler that sees the count sees the ends
            self.count(procs.REPLICA_MESSAGES_IN, self.replica_appended)
            self.replica_appended = 0
        for slot in touched:
            if slot in self.books:
                self.isr_pending.add(slot)
        if now >= self.isr_check_ms:
            self.isr_check_ms = now + max(1, min(self.lag_ms // 2, 1000))
            self.isr_pending.update(self.leading)
        if not self.isr_pending:
            return set()
        moved = set()
        pending, self.isr_pending = self.isr_pending, set()
        for slot in pending:
            book = self.books.get(slot)
            if book is None or book.role != ptable.ROLE_LEADER or book.tracker is None:
                continue
            if self.slots.get(slot) is not book.plog:
                continue
            changes = self._isr_changes(slot, book, now)
            hw = self._leader_hw(book)
            if hw > book.hw:
                book.hw = hw
                changes["high_watermark"] = hw
                moved.add(slot)
            if changes:
                self.table.write(slot, **changes)
            if book.isr_wanted != book.isr:
                self.isr_pending.add(slot)  # a commit is awaited: look again next round
        if moved:
            self.count(procs.HW_MOVES, len(moved))  # parked fetches look again (they read the HW)
        return moved

    def _isr_changes(self, slot: int, book: ReplicaBook, now: int) -> dict:
        """Adopt a new ISR commit, then say which ISR we want now.

        A commit is adopted when it was written during this leadership (the
        commit slot's seq moved), in our leader epoch, at a newer state node
        version than ours, naming us among our replicas: it is what ZooKeeper
        holds now. That is normally the ISR we want; when we changed our mind
        meanwhile (a follower left and came back before the write), the
        commit is still adopted, and the ISR we want now differs from it, so
        the registrar writes that one next: ZooKeeper and the HW never
        disagree for long."""
        changes = {}
        commits = self.isr_commits
        if commits is not None:
            seq = commits.seq(slot)
            if seq != book.commit_seq and not seq & 1:
                book.commit_seq = seq
                c = commits.read(slot)
                members = isr_members(book.replicas, c.commit_isr)
                if (c.state == ptable.COMMITTED and c.leader_epoch == book.leader_epoch
                        and c.commit_version > book.isr_version
                        and c.commit_isr >> len(book.replicas) == 0
                        and book.me in members):
                    book.isr = members
                    book.isr_version = c.commit_version
                    book.tracker.set_isr(book.isr)
                    changes.update(isr=c.commit_isr, isr_version=c.commit_version)
        wanted = tuple(book.tracker.wanted_isr(now, self.lag_ms, max(0, self.lag_bytes),
                                               book.plog.log_end_offset, book.hw))
        wanted = tuple(r for r in book.replicas if r in wanted or r == book.me)
        if wanted != book.isr_wanted:
            book.isr_wanted = wanted
            changes["isr_wanted"] = isr_bits(book.replicas, wanted)
            if book.dirs_placed:
                self._ring_logdirs()  # hb-logdirs makes it durable, then commits it
        return changes

    def _pump_replica(self) -> None:
        """Answers to hb-replica its ring could not take at once."""
        if self.rres is not None and self.rres.pending():
            self.rres.pump()
            self.replica_bell.wake()

    def _replicas_timeout_ms(self) -> int | None:
        if self.rres is not None and self.rres.pending():
            return now_ms() + 10
        return self.isr_check_ms if self.leading else None
