"""Replicas across this broker's log dirs, as their writers keep them (part
of ``hb-writer-N``; docs/storage.md, "Replicas across log dirs").

Mixed into :class:`~hostbroker.workers.writer.WriterWorker` beside
:class:`~hostbroker.workers.writer_replicas.Replicas` (the books, role
changes, ISR, HW and acks=-1 waiters, unchanged) and
:class:`~hostbroker.workers.writer_follower.Following` (the cut and the
restart it shares). On a standalone broker a replicated topic's replicas
sit on distinct log dirs, each in its own partition table slot, and are
named by their log dir's id (``<log dir>/log-dir-id``, read from the
:class:`~hostbroker.shm.logdirs.LogDirTable`): ``book.me``. ``hb-logdirs``
gives them their roles. This module owns:

- the ``dctl`` ring from ``hb-logdirs``, answered on ``dres``:
  OP_REPLICA_STATE with the keys of a dir-placed replica (``placement``,
  ``replica_slots``: every replica's slot by dir id, ``leader_slot``), and
  OP_DIR_REOPEN: an offline writer exits ``EXIT_REOPEN`` so that its
  replacement opens the dir afresh;
- **the copy**: a FOLLOWER's writer copies its leader's bytes straight from
  the leader's segment files (no FETCH, no hb-replica). Each round, for
  each book it follows (:meth:`LocalFollow._follow_local`):

  1. it reads the leader's slot ``L`` and goes on only while ``L`` is an
     ONLINE LEADER of the same partition in the book's leader epoch;
  2. it cuts its log where it parts from the leader's when it has not yet
     in this epoch (``fetch_epoch``): the pure ``Truncation`` exchange,
     each question answered from the leader's ``leader-epoch-checkpoint``
     as OFFSET_FOR_LEADER_EPOCH would (the leader saved it before its slot
     said LEADER), then ``_cut_to``; it publishes ``fetch_epoch``;
  3. it restarts its log at the leader's start when its end is below it
     (``_restart_at``, at most once a ``replica.fetch.backoff.ms``);
  4. it copies ``[LEO, end)``, ``end`` the least of the leader's published
     end, the end of the leader epoch holding LEO and the end of the
     leader segment holding LEO: with ``PartitionLog.append_copy``
     (``os.sendfile`` file to file, no CRC pass: these bytes were checked
     when produced, below an end that is always an entry boundary); past
     ``replica.fetch.max.bytes`` (catch-up), that much is read first to
     find where its whole entries end, and those are copied. The data's
     leader epoch goes into the epoch cache as a fetched append's does;
  5. it publishes its end and the HW (the leader's, never past its end),
     and rings the leader's writer. One still behind the leader's end
     copies again in the writer's next round, without sleeping.

  After each copy it reads the leader's slot again; a leader that moved to
  another epoch, or cut its log below what was copied, has the copy cut
  back, so no torn or foreign bytes stay. An error reading the leader's
  files (CopySourceError) is the leader's dir's: the follower backs off
  ``replica.fetch.backoff.ms`` and counts ERRORS; only its own file's
  errors take its dir offline;
- **the leader's side** (:meth:`LocalFollow._local_positions`): for each
  dir-placed book it leads (``local_leading``, kept as roles are taken: a
  cluster or plain leader costs nothing here) whose HW is below its end
  (all of them at the ISR check), each follower's slot is read, and an
  ONLINE one cut to this
  leader's log in this epoch (``fetch_epoch``), owned by the writer of that
  replica's log dir, counts as a fetch at its end; ISR, HW and the acks=-1
  waiters are then ``writer_replicas.py``'s.
  A leader whose end moved rings its followers' writers; the followers
  ring it back after a copy; a recheck every ``LOCAL_FOLLOW_RECHECK_MS``
  covers a ring lost to a replaced writer;
- **the probe** of the log dir every ``log.dir.check.interval.ms``, only
  where hb-logdirs runs (``plan.logdirs``: a standalone broker with two log
  dirs or more, where ``logdirs online`` can open a dir again): the dir must
  keep the ``(st_dev, st_ino)`` it had at open, and its ``log-dir-id`` must
  still read the same id, or the dir goes offline ("log dir removed or
  replaced"): writes to a pulled disk may still succeed on unlinked inodes.
  Of the errors, only ENOENT, ESTALE and EIO say the dir is gone; any other
  (EMFILE, ENOMEM...) is logged and the probe tried again;
- the doorbell of ``hb-logdirs``, rung when the dir goes offline and when a
  dir-placed leader wants another ISR.

Writers open dir-placed replicas STOPPED, always (``_open_book``), even
when the slot said LEADER: hb-logdirs sees the writer's board epoch move
and gives the roles again, so a writer that comes back never leads in a
stale epoch.
"""

from __future__ import annotations

import bisect
import errno
import os
import sys

from hostbroker.errors import ErrorCode, StorageError
from hostbroker.log import message as logmsg
from hostbroker.log.dirids import DIR_ID_FILE, read_dir_id
from hostbroker.log.epochs import LeaderEpochCache
from hostbroker.log.files import NotAFileError
from hostbroker.log.partition import CopySourceError, PartitionLog
from hostbroker.log.partition_file import PLACEMENT_LOG_DIRS as LOG_DIRS_NAME
from hostbroker.log.segments import list_segment_bases, partition_dirname, segment_filename
from hostbroker.replication.truncation import Truncation
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.logdirs import NO_DIR_ID, LogDirTable
from hostbroker.shm.table import TornSlotError
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import EXIT_REOPEN, now_ms

LOCAL_FOLLOW_RECHECK_MS = 100  # followers look at their leaders' slots at least this often
# errors of a probe that say the dir is gone (a pulled disk, a lost mount); any
# other (EMFILE, ENOMEM, EACCES...) is logged and the probe tried again
REMOVED_ERRNOS = frozenset((errno.ENOENT, errno.ESTALE, errno.EIO))



def _id_file_replaced(error: OSError) -> bool:
    """An error reading ``log-dir-id`` that says something else is there now
    (a link, a directory, a FIFO...): another id, not a passing failure."""
    return isinstance(error, NotAFileError) or error.errno in (errno.ELOOP, errno.EISDIR)


class LocalFollow:
    """Mixin of :class:`WriterWorker`: dir-placed replicas' roles from
    hb-logdirs, the follower's copy, the leader's view of its followers,
    and the log dir probe. The class attributes are what a writer without
    them has (one built without :meth:`_init_local`, as tests do)."""

    local_following: set[int] = frozenset()
    local_leading: set[int] = frozenset()
    local_sources: dict = {}
    local_epochs: dict = {}
    local_bases: dict = {}
    local_backoff: dict = {}
    local_restarts: dict = {}
    dctl = dres = logdirs_bell = logdirs = None
    reopen_exit: int | None = None
    dir_marks = None
    probe_failing = False
    local_dir_index: dict = {}  # log dir id -> its writer's index (replaced, never changed)

    # -- start-up ----------------------------------------------------------
    def _init_local(self) -> None:
        """Rings, tables and the probe's marks; after the log dir is opened,
        before the partitions are registered."""
        self.local_following: set[int] = set()  # slots of dir-placed books that follow
        self.local_leading: set[int] = set()  # slots of dir-placed books that lead
        self.local_sources: dict[int, tuple[int, int, int]] = {}  # slot -> (leader slot, base, fd)
        self.local_epochs: dict[int, tuple[tuple, LeaderEpochCache]] = {}  # slot -> (key, cache)
        self.local_bases: dict[int, tuple[tuple, list[int]]] = {}  # slot -> (key, leader bases)
        self.local_backoff: dict[int, int] = {}  # slot -> ms before which it does not copy
        self.local_restarts: dict[int, int] = {}  # slot -> ms of its last log restart
        self.writer_bells: dict[int, object] = {}
        self.local_recheck_ms = now_ms() + LOCAL_FOLLOW_RECHECK_MS
        self.fetch_max_bytes = self.config["replica.fetch.max.bytes"]
        self.fetch_backoff_ms = self.config["replica.fetch.backoff.ms"]
        self.check_interval_ms = self.config["log.dir.check.interval.ms"]
        self.next_probe_ms = now_ms() + self.check_interval_ms
        name = getattr(self.plan, "logdirs_name", None)
        self.logdirs = LogDirTable.attach(name, readonly=True) if name else None
        self.dctl = self.dres = self.logdirs_bell = None
        if getattr(self.plan, "logdirs", False):
            self.dctl = self.receiver("dctl", 0, self.index)
            self.dres = self.sender("dres", self.index, 0)
            self.logdirs_bell = self.waker("logdirs", 0)
        self.dir_marks = None
        self.probe_failing = False
        if self.logdir is not None and getattr(self.plan, "logdirs", False):
            # only where hb-logdirs runs (>= 2 log dirs, standalone): nothing
            # else would give a dir the probe took offline back
            try:
                self.dir_marks = self._dir_marks()
            except (OSError, StorageError) as e:  # a damaged id file: the dir starts offline
                print(f"hostbroker: {self.name}: log dir {self.path} is offline: {e}",
                      file=sys.stderr, flush=True)
                self.logdir.close()
                self.logdir, self.offline = None, True
                self.count(procs.ERRORS)

    def _replica_identity(self, plog: PartitionLog) -> tuple[int, int]:
        """``(me, placement)`` of a replica's book: our log dir's id for one
        placed on log dirs (-1 while the id is unknown), the broker id else."""
        if plog.placement == LOG_DIRS_NAME:
            me = self.logdirs.dir_id(self.index) if self.logdirs is not None else NO_DIR_ID
            return me, ptable.PLACEMENT_LOG_DIRS
        return self.broker_id, ptable.PLACEMENT_BROKERS

    def main(self) -> int:
        code = super().main()
        return self.reopen_exit if self.reopen_exit is not None else code

    # -- the dctl ring ---------------------------------------------------------
    def _serve_logdirs_ring(self) -> None:
        """Roles and reopens from hb-logdirs, answered on ``dres``."""
        receiver = self.dctl
        if receiver is None:
            return
        if self.dres.pending():  # answers the ring could not take at once
            self.dres.pump()
            self.logdirs_bell.wake()
        if not receiver.has_unread():
            return
        for m in receiver.poll():
            op, token = env.decode_op(m)
            if op == env.OP_REPLICA_STATE:
                answer = self._replica_state(env.decode_json(m))
            elif op == env.OP_DIR_REOPEN:
                answer = self._dir_reopen(env.decode_json(m))
            else:
                answer = {"error": int(ErrorCode.INVALID_REQUEST), "message": f"no op {op}"}
            self.dres.send(*env.encode_json(op, token, answer))
        receiver.done()
        self.dres.pump()
        self.logdirs_bell.wake()

    def _dir_reopen(self, request) -> dict:
        """Exit for a replacement that opens our dir afresh, if it is offline."""
        if not isinstance(request, dict) or type(request.get("dir_id")) is not int:
            return {"error": int(ErrorCode.INVALID_REQUEST), "message": "bad dir reopen"}
        if not self.offline:
            return {"error": 0, "reopening": False}
        print(f"hostbroker: {self.name}: log dir {self.path} is opened again",
              file=sys.stderr, flush=True)
        self.reopen_exit = EXIT_REOPEN
        self.stopping = True
        return {"error": 0, "reopening": True}

    def _ring_logdirs(self) -> None:
        if self.logdirs_bell is not None:
            self.logdirs_bell.ring()

    # -- OP_REPLICA_STATE's dir-placed keys --------------------------------
    def _local_state(self, book, request) -> dict | None:
        """The dir-placed keys of an OP_REPLICA_STATE, checked: None for a
        cluster replica's. ValueError when the request and the replica do
        not agree on where it is placed, or for bad slots."""
        placed = request.get("placement") == LOG_DIRS_NAME
        if placed != book.dirs_placed:
            raise ValueError(f"{book.plog.topic}-{book.plog.partition} is "
                             f"{'' if book.dirs_placed else 'not '}placed on log dirs")
        if not placed:
            return None
        if book.me == NO_DIR_ID:
            raise ValueError(f"log dir {self.path} has no id yet")
        raw = request.get("replica_slots")
        if not isinstance(raw, dict):
            raise ValueError("replica_slots is not an object")
        slots = {}
        for k, v in raw.items():
            if type(v) is not int or not 0 <= v < self.table.slot_count:
                raise ValueError(f"replica slot {v!r} outside the table")
            slots[int(k)] = v
        leader_slot = request.get("leader_slot", ptable.NO_SLOT)
        if type(leader_slot) is not int or not -1 <= leader_slot < self.table.slot_count:
            raise ValueError(f"leader slot {leader_slot!r} outside the table")
        return {"replica_slots": slots, "leader_slot": leader_slot}

    def _local_take(self, slot: int, book, local: dict | None) -> None:
        """Keep what :meth:`_local_state` checked, as the book's role is set."""
        if local is None:
            return
        book.replica_slots = local["replica_slots"]
        if book.role != ptable.ROLE_FOLLOWER:
            book.leader_slot = ptable.NO_SLOT
        elif local["leader_slot"] != book.leader_slot:
            book.leader_slot = local["leader_slot"]
            self._close_source(slot)
        if book.role == ptable.ROLE_FOLLOWER and book.leader_slot >= 0:
            self.local_following.add(slot)
            self.local_backoff.pop(slot, None)
        else:
            self.local_following.discard(slot)
            self._close_source(slot)
        if book.role == ptable.ROLE_LEADER:
            self.local_leading.add(slot)
        else:
            self.local_leading.discard(slot)

    def _local_forget(self, slot: int) -> None:
        """A book dropped (its partition deleted or its log closed)."""
        if slot in self.local_following:
            self.local_following.discard(slot)
        if slot in self.local_leading:
            self.local_leading.discard(slot)
        self._close_source(slot)
        self.local_epochs.pop(slot, None)
        self.local_bases.pop(slot, None)
        self.local_backoff.pop(slot, None)
        self.local_restarts.pop(slot, None)

    def _close_source(self, slot: int) -> None:
        src = self.local_sources.pop(slot, None)
        if src is not None:
            try:
                os.close(src[2])
            except OSError:
                pass

    # -- the follower's round ----------------------------------------------------
    def _follow_local(self, touched: set[int]) -> None:
        """Copy what each dir-placed follower lacks from its leader's files
        (module docstring); the slots that grew go into ``touched``. A
        follower that copied and is still behind its leader's end has the
        next round come at once, not at the recheck: catch-up goes on while
        data remains (one ``replica.fetch.max.bytes`` per book a round, the
        writer's other work between)."""
        if not self.local_following or self.offline:
            return
        now = now_ms()
        self.local_recheck_ms = now + LOCAL_FOLLOW_RECHECK_MS
        rung = set()
        behind = False
        for slot in list(self.local_following):
            if self.local_backoff.get(slot, 0) > now:
                continue
            book = self.books.get(slot)
            if book is None or book.role != ptable.ROLE_FOLLOWER or book.leader_slot < 0:
                self.local_following.discard(slot)
                continue
            if self.slots.get(slot) is not book.plog:
                continue
            leader = self._leader_of(book)
            if leader is None:
                continue  # hb-logdirs sends the next role
            try:
                moved = self._copy_from_leader(slot, book, leader, now)
            except CopySourceError as e:
                self._source_failed(slot, e, now)
                continue
            except (OSError, StorageError) as e:
                if not self.offline:  # (a cut or a restart took the dir offline already)
                    self._go_offline(e)
                return
            if moved:
                touched.add(slot)
                self._publish(slot, book.plog)
                behind = behind or book.plog.log_end_offset < leader.end_offset
                if leader.owner not in rung:
                    rung.add(leader.owner)
                    self._writer_bell(leader.owner).wake()
            hw = max(book.plog.log_start_offset, min(leader.high_watermark,
                                                     book.plog.log_end_offset))
            if hw != book.hw:
                book.hw = hw
                self.table.write(slot, high_watermark=hw)
        if behind:
            self.local_recheck_ms = now  # more to copy: the loop does not sleep

    def _leader_of(self, book):
        """The leader's slot as read now, or None unless it is an ONLINE
        LEADER of the book's partition in the book's leader epoch."""
        try:
            s = self.table.read(book.leader_slot)
        except TornSlotError:
            return None
        plog = book.plog
        if (s.state != ptable.ONLINE or s.role != ptable.ROLE_LEADER
                or s.placement != ptable.PLACEMENT_LOG_DIRS
                or s.leader_epoch != book.leader_epoch
                or (s.name, s.partition) != (plog.topic, plog.partition)
                or s.owner == self.index):
            return None
        return s

    def _leader_path(self, leader) -> str:
        return os.path.join(self.plan.log_dirs[leader.owner],
                            partition_dirname(leader.name, leader.partition))

    def _copy_from_leader(self, slot: int, book, leader, now: int) -> bool:
        """Steps 2-4 of the round for one book; True when the log grew.
        CopySourceError for the leader's side, StorageError for ours."""
        plog = book.plog
        path = self._leader_path(leader)
        if book.fetch_epoch != book.leader_epoch:
            self._cut_to_leader(slot, book, leader, path)
        if plog.log_end_offset < leader.start_offset:
            if now - self.local_restarts.get(slot, -self.fetch_backoff_ms) < self.fetch_backoff_ms:
                return False  # past our end, once per backoff
            self.local_restarts[slot] = now
            self._restart_at(slot, leader.start_offset)
        leo = plog.log_end_offset
        end = leader.end_offset
        if leo >= end:
            return False
        data_epoch = leader.leader_epoch
        if leo < leader.epoch_start:
            data_epoch, epoch_end = self._leader_epochs(slot, leader, path).epoch_at(leo, end)
            end = min(end, epoch_end)
        bases = self._leader_bases(slot, leader, path)
        i = bisect.bisect_right(bases, leo) - 1
        if i < 0:
            raise CopySourceError(f"{path} holds no segment at {leo}")
        base = bases[i]
        if i + 1 < len(bases):
            end = min(end, bases[i + 1])
        if end <= leo:
            return False
        fd = self._source(slot, book.leader_slot, base, path)
        self._note_epoch(book, data_epoch, leo)
        if end - leo <= self.fetch_max_bytes:
            plog.append_copy(fd, leo - base, end - leo, new_segment=leo == base)
        else:
            self._catch_up(plog, fd, leo - base, base, end)
        self.replica_appended += 1
        self.count(procs.BYTES_IN, plog.log_end_offset - leo)
        after = self._leader_of(book)
        if after is None or (after.segment_generation != leader.segment_generation
                             and after.end_offset < plog.log_end_offset):
            # the leader left this epoch or cut its log under the copy: undo it
            self._cut_to(slot, leo)
            book.fetch_epoch = -1
            self.table.write(slot, fetch_epoch=-1)
            return plog.log_end_offset != leo
        return True

    def _catch_up(self, plog: PartitionLog, fd: int, pos: int, base: int, end: int) -> None:
        """A copy of at most ``replica.fetch.max.bytes`` cut to whole entries
        (read first: where they end is only known by walking their lengths),
        below ``end``. An entry longer than that is copied alone."""
        leo = plog.log_end_offset
        try:
            buf = os.pread(fd, self.fetch_max_bytes, pos)
        except OSError as e:
            raise CopySourceError(f"cannot read a leader segment at {base}: {e}") from e
        count, whole = logmsg.count_entries(buf)
        if not count:  # one entry longer than the cap: copied alone
            whole = 4 + int.from_bytes(buf[:4], "big", signed=True) if len(buf) >= 4 else 0
            if not 4 < whole <= end - leo:
                raise CopySourceError(f"a leader segment at {base} holds no whole entry at {leo}")
        # copied, not appended from the buffer: an append may roll, and the
        # segments must start where the leader's do
        plog.append_copy(fd, pos, whole, new_segment=leo == base)

    def _cut_to_leader(self, slot: int, book, leader, path: str) -> None:
        """Step 2: cut our log where it parts from the leader's (the
        leader's epoch file answers the exchange's questions), then publish
        that it is a prefix of the leader's in this epoch."""
        plog = book.plog
        try:
            theirs = LeaderEpochCache.load(path)
        except (OSError, StorageError) as e:
            raise CopySourceError(f"cannot read the leader's epochs in {path}: {e}") from e
        exchange = Truncation(book.epochs.entries, plog.log_end_offset, book.hw)
        step = exchange.first()
        while step.ask is not None:
            step = exchange.answer(*theirs.end_offset_for(step.ask, leader.end_offset))
        cut = max(step.cut, plog.log_start_offset)
        if cut < plog.log_end_offset:
            self._cut_to(slot, cut)
        book.fetch_epoch = book.leader_epoch
        self.table.write(slot, fetch_epoch=book.fetch_epoch)

    def _note_epoch(self, book, data_epoch: int, start: int) -> None:
        """The data's leader epoch into our epoch cache, as a fetched append's."""
        epochs = book.epochs
        if 0 <= data_epoch < epochs.latest_epoch and epochs.latest_start >= start:
            epochs.truncate_from_end(start)  # our newest epochs hold no message
        if data_epoch > epochs.latest_epoch:
            epochs.assign(data_epoch, start)

    def _leader_epochs(self, slot: int, leader, path: str) -> LeaderEpochCache:
        """The leader's epoch file, read again when its leadership or epoch start moved."""
        key = (leader.owner, leader.leader_epoch, leader.epoch_start)
        cached = self.local_epochs.get(slot)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            epochs = LeaderEpochCache.load(path)
        except (OSError, StorageError) as e:
            raise CopySourceError(f"cannot read the leader's epochs in {path}: {e}") from e
        self.local_epochs[slot] = (key, epochs)
        return epochs

    def _leader_bases(self, slot: int, leader, path: str) -> list[int]:
        """The leader's segment bases, listed again when its segment generation moves."""
        key = (leader.owner, leader.segment_generation)
        cached = self.local_bases.get(slot)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            bases = list_segment_bases(path, leader.start_offset, leader.end_offset)
        except OSError as e:
            raise CopySourceError(f"cannot list {path}: {e}") from e
        self.local_bases[slot] = (key, bases)
        return bases

    def _source(self, slot: int, leader_slot: int, base: int, path: str) -> int:
        """A read fd of the leader's segment at ``base`` (one kept per book)."""
        src = self.local_sources.get(slot)
        if src is not None and src[:2] == (leader_slot, base):
            return src[2]
        self._close_source(slot)
        try:
            fd = os.open(os.path.join(path, segment_filename(base)),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise CopySourceError(f"cannot open the leader's segment {base} in {path}: "
                                  f"{e.strerror or e}") from e
        self.local_sources[slot] = (leader_slot, base, fd)
        return fd

    def _source_failed(self, slot: int, error: BaseException, now: int) -> None:
        """The leader's dir failed us: not ours to take offline. Back off."""
        if slot not in self.local_backoff:
            print(f"hostbroker: {self.name}: slot {slot}: {error}; retrying every "
                  f"{self.fetch_backoff_ms} ms", file=sys.stderr, flush=True)
        self._close_source(slot)
        self.local_bases.pop(slot, None)
        self.local_backoff[slot] = now + self.fetch_backoff_ms
        self.count(procs.ERRORS)

    def _writer_bell(self, index: int):
        bell = self.writer_bells.get(index)
        if bell is None:
            bell = self.writer_bells[index] = self.waker("writer", index)
        return bell

    # -- the leader's side -----------------------------------------------------
    def _local_positions(self, now: int, touched=()) -> None:
        """Each dir-placed leader's followers' positions, read from their
        slots, as fetches (module docstring); the followers of a leader
        whose end moved (``touched``) are rung."""
        check_all = now >= self.isr_check_ms
        rung = set()
        for slot in self.local_leading:  # (never a cluster or plain book: no cost for them)
            book = self.books.get(slot)
            if book is None or book.role != ptable.ROLE_LEADER or book.tracker is None:
                continue
            plog = book.plog
            leo = plog.log_end_offset
            if book.hw >= leo and not check_all:
                continue
            for replica, fslot in book.replica_slots.items():
                if replica == book.me or fslot == slot:
                    continue
                try:
                    f = self.table.read(fslot)
                except TornSlotError:
                    continue
                if (f.state != ptable.ONLINE or f.placement != ptable.PLACEMENT_LOG_DIRS
                        or f.fetch_epoch != book.leader_epoch
                        or (f.name, f.partition) != (plog.topic, plog.partition)
                        or not self._serves(f.owner, replica)):
                    continue
                book.tracker.fetched(replica, min(f.end_offset, leo), leo, now)
                self.isr_pending.add(slot)
                if slot in touched and f.end_offset < leo and f.owner not in rung:
                    rung.add(f.owner)
                    self._writer_bell(f.owner).wake()

    def _serves(self, owner: int, replica: int) -> bool:
        """Whether writer ``owner`` is the one of log dir id ``replica``: a
        slot read as a follower's counts only if its owner is that dir's
        writer (a slot freed and claimed again in between is another's).
        The ids by writer are kept and read again on a miss: an id never
        moves to another writer while the broker runs."""
        if owner == self.index or self.logdirs is None:
            return False
        if self.local_dir_index.get(replica) == owner:
            return True
        self.local_dir_index = {d: w for w, d in self.logdirs.ids().items()}
        return self.local_dir_index.get(replica) == owner

    def _local_timeout_ms(self) -> int | None:
        """When the loop must look again: the probe, a follower's recheck."""
        due = self.next_probe_ms if self.dir_marks is not None and not self.offline else None
        if self.local_following:
            due = self.local_recheck_ms if due is None else min(due, self.local_recheck_ms)
        if self.dres is not None and self.dres.pending():
            due = now_ms() + 10 if due is None else min(due, now_ms() + 10)
        return due

    # -- the probe ----------------------------------------------------------
    def _dir_marks(self) -> tuple[tuple[int, int], int | None]:
        """``((st_dev, st_ino), id)`` of the log dir (id None: no id file).
        OSError or StorageError (a bad id file) when it cannot be read."""
        info = os.stat(self.path)
        return (info.st_dev, info.st_ino), read_dir_id(self.path)

    def _probe_dir(self, now: int) -> None:
        """The log dir is still the one opened (module docstring), else
        offline. Only ENOENT, ESTALE or EIO, a changed ``(st_dev, st_ino)``
        or another id in ``log-dir-id`` (or none, one that cannot be parsed,
        or a link or other non-file in its place) say so; any other error (EMFILE, ENOMEM...) is logged once and
        the probe is tried again at the next interval."""
        if self.dir_marks is None or self.offline or now < self.next_probe_ms:
            return
        self.next_probe_ms = now + self.check_interval_ms
        try:
            marks = self._dir_marks()
        except (OSError, StorageError) as e:
            failure = e if isinstance(e, OSError) else e.__cause__
            if (isinstance(failure, OSError) and failure.errno not in REMOVED_ERRNOS
                    and not _id_file_replaced(failure)):
                if not self.probe_failing:
                    self.probe_failing = True
                    print(f"hostbroker: {self.name}: cannot probe log dir {self.path}: {e}; "
                          f"trying again every {self.check_interval_ms} ms",
                          file=sys.stderr, flush=True)
                    self.count(procs.ERRORS)
                return
            # gone, or its id file holds no id or is not a file now: not our dir
            self._go_offline(StorageError(f"log dir removed or replaced: {e}"))
            return
        self.probe_failing = False
        if marks[0] != self.dir_marks[0] or \
                (self.dir_marks[1] is not None and marks[1] != self.dir_marks[1]):
            self._go_offline(StorageError("log dir removed or replaced"))
        elif marks[1] != self.dir_marks[1]:
            self.dir_marks = marks  # an id written since (a new disk given its id)
