"""The loop of ``hb-logdirs`` (what it owns, reads and writes: the package docstring).

Each round: the writers' answers (``dres``), the handlers' admin requests
(``dreq``), then, on the doorbell or every ``PASS_INTERVAL_S``, a pass:

1. ``live`` = the dirs whose writer has not flagged them offline, whose
   writer is READY (or was within ``logdirs.writer.grace.ms``), whose last
   state write did not fail and whose state writes have not been late
   (past ``logdirs.state.write.timeout.ms``) for
   ``logdirs.state.write.fail.ms``; per partition, minus a dir whose replica
   slot is offline or absent.
2. :func:`.elect.decide` for every partition; the changes are written once
   for all partitions (:meth:`LogDirsWorker.write_doc`), durable on every dir
   the document names online. A dir whose write fails leaves ``live``, a dir
   whose write is late leaves the document's ``online`` list only, and the
   pass is made again without it; when no dir takes the write, nothing
   changes (as when ZooKeeper cannot be reached).
3. Every replica whose writer is READY is sent the OP_REPLICA_STATE the
   document gives it when that differs from what it was last sent: leaders
   first, then followers, then stopped replicas. A writer replaced since (its
   board epoch moved) starts its replicas STOPPED, so it is sent them all
   again once READY.
4. After a pass that moved a leadership, the table's generation is bumped
   (admin lock), so handlers look for the serving slot again. The
   LogDirTable's states and counts are brought up to date.

A pass whose scan of the partition table fails (a slot left mid-write by a
dead worker, until the supervisor repairs it) decides nothing; until a scan
has succeeded, no ISR commit or admin round runs either, and a start that read
no state file copy waits for it to know whether replicas exist (frozen) or not.

An OP_REPLICA_STATE not answered is not waited for: what a writer was sent
is forgotten when it answers with an error or is replaced, and the next pass
sends it again. Reading the dir-placed slots and telling the replicas their
roles: :mod:`.replicas`.
"""

from __future__ import annotations

import contextlib

import sys
import time

from hostbroker.errors import ErrorCode
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import Worker
from hostbroker.workers.logdirs import elect
from hostbroker.workers.logdirs.admin import ONLINE_LOOK_S, Admin
from hostbroker.workers.logdirs.model import Document, Part
from hostbroker.workers.logdirs.replicas import DirReplicas
from hostbroker.workers.logdirs.statefile import StateWriters, read_copies

PASS_INTERVAL_S = 0.1
NO_COPY = ("no log dir holds a readable state file; replicas across log dirs stay "
           "stopped (see docs/storage.md)")
RETRY_S = 1.0  # a replica state its writer refused is sent again after this
TP = tuple[str, int]


class LogDirsWorker(Admin, DirReplicas, Worker):
    kind = "logdirs"
    process_name = "hb-logdirs"

    @property
    def name(self) -> str:
        return self.process_name  # one per broker

    def init_process(self) -> None:
        from hostbroker.shm.adminlock import AdminLock
        from hostbroker.shm.logdirs import LogDirTable

        super().init_process()
        plan, config = self.plan, self.config
        self.table = ptable.PartitionTable.attach(plan.table_name)
        self.dirtable = LogDirTable.attach(plan.logdirs_name)
        self.commits = ptable.IsrCommitTable.attach(plan.isr_commits_name)
        self.lock = AdminLock.attach(plan.admin_lock_key, config["admin.lock.timeout.ms"] / 1000)
        n = plan.num_writers
        self.writer_slots = [plan.board_slot("writer", w) for w in range(n)]
        self.to_writers = [self.sender("dctl", 0, w) for w in range(n)]
        self.results = [self.receiver("dres", w, 0) for w in range(n)]
        self.writer_bells = [self.waker("writer", w) for w in range(n)]
        self.requests = [self.receiver("dreq", h, 0) for h in range(plan.num_handlers)]
        self.answers = [self.sender("dans", 0, h) for h in range(plan.num_handlers)]
        self.handler_bells = [self.waker("handler", h) for h in range(plan.num_handlers)]
        self.setup()

    def setup(self) -> None:
        """What follows the attaching: the state writers, the document read from
        the log dirs, the ISR commits and the admin (tests start here, with the
        tables, board and rings attached)."""
        from hostbroker.replication.localstate import StateLimits
        from hostbroker.workers.logdirs.isr import LocalIsrCommits

        config = self.config
        self.limits = StateLimits.of(config)
        self.grace_s = config["logdirs.writer.grace.ms"] / 1000
        self.fail_s = config["logdirs.state.write.fail.ms"] / 1000
        self.retry_s = config["logdirs.state.retry.ms"] / 1000
        self.retry_at = 0.0  # when a failed dir's state write is tried again
        self.writers = StateWriters(config["logdirs.state.write.timeout.ms"] / 1000)
        for index in self.dirtable.repair_torn():  # (left mid-write by the one replaced)
            self.say(f"log dir table slot {index} was left mid-write; repaired")
        for index, dir_id in self.dirtable.ids().items():
            self.writers.set_dir(dir_id, self.plan.log_dirs[index])
        self.writer_epochs = [self.board.epoch(i) for i in self.writer_slots]
        self.not_ready_since: dict[int, float] = {}
        self.write_failed: set[int] = set()  # dirs whose last state write failed
        self.write_late: dict[int, float] = {}  # dir -> since when its state writes are late
        self.write_problem = ""  # why the last write_doc wrote nothing ("" : it did)
        # foreign dirs (their copy is not of the lineage started from, or was refused):
        # dir id -> the one line saying what the operator must do; kept offline and no
        # stray is deleted until `logdirs forget` (docs/runbook-disk.md)
        self.held: dict[int, str] = {}
        self.sent: dict[tuple[str, int, int], tuple] = {}  # (t, p, dir) -> what it was told
        self.refused: dict[tuple[str, int, int], tuple] = {}  # -> (what, when to try again)
        self.pending: dict[int, tuple] = {}  # token -> (kind, ...) sent to a writer
        self.next_token = time.monotonic_ns()
        self.next_pass = 0.0
        self.slots: dict[TP, dict[int, int]] = {}  # (t, p) -> {dir id: slot}
        self.slot_states: dict[int, object] = {}  # slot -> its last read
        self.scanned = False  # a scan of the table has succeeded since the start
        self.scan_key = None  # (generation, offline flags, dir ids) of the last whole scan
        self.unsure = False  # no copy was read and the table could not be scanned yet
        self.blocked: set[int] = set()
        # writers whose dir is kept out until `logdirs online`: its id file was bad at
        # start, or its state file copy could not be read while the copies name it online
        self.unidentified: set[int] = set()
        self.start_seq = 0  # seq of the copy this broker started from (0: none)
        self.frozen = False  # no state file readable while replicas exist: change nothing
        self.moved = False  # a leadership moved since the last generation bump
        self.doc = self._load()
        self.isr = LocalIsrCommits(self, self.table)
        self.init_admin()

    # -- start ---------------------------------------------------------------
    def _load(self) -> Document:
        """The newest state file copy of the log dirs (see docs/storage.md). Every
        configured dir is read, an offline one too, and one whose id file is bad
        counts as the dir the copies name at its path when it holds a copy: a dir
        is missing when no configured dir holds its id (a dead disk, an empty mount
        point) or its copy is absent or could not be read or decoded. A configured
        dir missing that way is kept out (``unidentified``) until ``logdirs online``
        reads its copy again. The dirs are read in parallel, at most
        ``ONLINE_LOOK_S``: a copy not read by then (a hung disk) is one that could
        not be read."""
        from hostbroker.replication.localstate import new_history, start_copy

        ids = self.dirtable.ids()
        # (read by threads, at most ONLINE_LOOK_S: a hung disk's copy is not there)
        copies, missing = read_copies(dict(enumerate(self.plan.log_dirs)), self.limits,
                                      timeout_s=ONLINE_LOOK_S)
        read = {index: (copies.get(index), missing.get(index, ""), True)
                for index in range(len(self.plan.log_dirs))}
        for index, path in enumerate(self.plan.log_dirs):
            if read[index][1]:
                self.say(f"log dir {path}: state file unusable: {read[index][1]}")
        by_path: dict[str, int] = {}
        for copy, _, _ in sorted((r for r in read.values() if r[0] is not None),
                                 key=lambda r: r[0].seq):
            by_path.update({path: dir_id for dir_id, path in copy.dirs.items()})
        present: dict[int, object] = {}
        for index, (copy, _, _) in read.items():
            dir_id = ids.get(index)
            if dir_id is None and copy is not None:
                # its id file is bad, but it holds a copy: the dir the copies name
                # there, listed under that id (offline, never live until it is taken
                # back with `logdirs online`)
                dir_id = by_path.get(self.plan.log_dirs[index])
                if dir_id is not None and self.dirtable.index_of(dir_id) is None:
                    self.dirtable.set_id(index, dir_id)
                    self.unidentified.add(index)
            if dir_id is not None and copy is not None:
                # (a copy that is absent, damaged or unreadable counts as not there:
                # the dir may have held a newer one)
                present[dir_id] = copy
        self._scan()
        found = start_copy(present)
        state = found.state
        self.start_seq = 0 if state is None else state.seq
        online = {d: self.plan.log_dirs[i] for i, d in ids.items()
                  if i not in self.table.offline_log_dirs()}
        if state is None:
            # frozen when replicas exist; while the table cannot be read, until it can
            self.unsure = not self.scanned
            self.frozen = self.unsure or bool(self.slots)
            if self.frozen and not self.unsure:
                self.say(NO_COPY)
            return Document(online=sorted(online), dirs=dict(online), history=new_history())
        doc = Document.from_state(state)
        ids_at = {d: i for i, d in self.dirtable.ids().items()}
        for dir_id, why in sorted(found.foreign.items()):
            index = ids_at.get(dir_id)
            if index is not None:
                self.unidentified.add(index)  # kept offline, never written
            seq, history = doc.refused.get(dir_id) or (present[dir_id].seq,
                                                       present[dir_id].history)
            # recorded, so that this lineage's copies keep refusing it
            doc.refused[dir_id] = (seq, history)
            path = self.plan.log_dirs[index] if index is not None else doc.dirs.get(dir_id, "?")
            self.held[dir_id] = self.held_line(dir_id, path, why)
            self.say(self.held[dir_id])
            if dir_id in present:  # (this lineage's writes go past it)
                doc.seq = max(doc.seq, present[dir_id].seq)
        present = {d: c for d, c in present.items() if d not in found.foreign}
        # certain: every dir the copy names online was read now (none holds a newer one)
        self.blocked = set(doc.online) - set(present)
        for dir_id in sorted(self.blocked - set(self.held)):  # (a held one said its line)
            index = ids_at.get(dir_id)
            if index is not None:
                # configured, but its copy could not be read: kept out (not live, not
                # written) until `logdirs online` reads it again and compares it
                self.unidentified.add(index)
                why = read[index][1] or "no state file"
                what = f"holds no readable state file ({why})"
            else:
                what = "is missing"
            self.say(f"log dir id {dir_id} ({doc.dirs.get(dir_id, '?')}) was online at the "
                     f"last change and {what}: partitions whose ISR names it stay "
                     "leaderless until it is taken back with `hostbroker logdirs online` "
                     f"or `hostbroker logdirs forget --log-dir-id {dir_id}`")
        doc.dirs.update(online)
        return doc

    @staticmethod
    def held_line(dir_id: int, path: str, why: str) -> str:
        """The one line of a foreign dir: what it is and the operator's ways out."""
        return (f"log dir {path} (id {dir_id}): {why}, not of the lineage this broker "
                "started from: it stays offline and no stray replica is deleted; keep this "
                f"broker's state: `hostbroker logdirs forget --log-dir-id {dir_id}` then "
                f"`hostbroker logdirs online --log-dir {path}`; take that copy: stop the "
                "broker and put it in every log dir (docs/runbook-disk.md)")

    def run(self) -> None:
        self._pass(time.monotonic())
        self.board.set_state(self.slot, procs.WORKER_READY)
        self.serve_rings()

    # -- the loop ---------------------------------------------------------------
    def _timeout(self) -> float:
        if any(s.pending() for s in self.to_writers) or any(s.pending() for s in self.answers):
            return 0.01
        if self.creation_due():  # replicas still to make: the next round at once
            return 0.0
        return max(0.0, min(PASS_INTERVAL_S, self.next_pass - time.monotonic()))

    def _cycle(self) -> None:
        self._take_results()
        self._take_requests()
        now = time.monotonic()
        self._writers_replaced()
        self._pass(now)  # on the doorbell too: a writer rang for a failure or an ISR
        if self.scanned:  # (until the table is read, nothing is known of the replicas)
            self.isr.poll()
            self.admin_round(now)
        self._pump()

    def _pump(self) -> None:
        for w, sender in enumerate(self.to_writers):
            if sender.pending():
                sender.pump()
                self.writer_bells[w].wake()
        for h, sender in enumerate(self.answers):
            if sender.pending():
                sender.pump()
                self.handler_bells[h].wake()

    def say(self, line: str) -> None:
        print(f"hostbroker: {self.name}: {line}", file=sys.stderr, flush=True)

    def token(self, what: tuple) -> int:
        self.next_token += 1
        self.pending[self.next_token] = what
        return self.next_token

    # -- writers ---------------------------------------------------------------
    def _writers_replaced(self) -> None:
        """A replaced writer starts its dir-placed replicas STOPPED: tell it again."""
        for w, slot in enumerate(self.writer_slots):
            epoch = self.board.epoch(slot)
            if epoch != self.writer_epochs[w]:
                self.writer_epochs[w] = epoch
                self.forget_sent(w)

    def forget_sent(self, w: int) -> None:
        """Writer ``w`` was replaced: what it was sent is lost with its ring."""
        dir_id = self.dirtable.dir_id(w)
        for key in [k for k in self.sent if k[2] == dir_id]:
            del self.sent[key]
        for told in self.deletions.values():  # (what is left of them: strays, deleted later)
            told.difference_update([slot for slot in told if slot in self.slot_states
                                    and self.slot_states[slot].owner == w])
        self.pending = {token: what for token, what in self.pending.items()
                        if not self._sent_to(what, w, dir_id)}

    def _sent_to(self, what: tuple, w: int, dir_id: int) -> bool:
        """Whether the op ``what`` (a pending token's) went to writer ``w``."""
        if what[0] == "state":
            return what[1][2] == dir_id
        if what[0] in ("delete", "stray"):
            s = self.slot_states.get(what[2])
            return s is None or s.owner == w
        return what[0] == "reopen" and what[1] == w

    def writer_ready(self, w: int) -> bool:
        return self.board.read(self.writer_slots[w]).state == procs.WORKER_READY

    def live_dirs(self, now: float) -> set[int]:
        """Dir ids that are online, whose writer is READY (or was within the grace),
        whose last state write did not fail, and whose state writes have not been
        late for ``logdirs.state.write.fail.ms``."""
        offline = self.table.offline_log_dirs() | self.unidentified
        live = set()
        for w, dir_id in self.dirtable.ids().items():
            if w in offline or dir_id in self.write_failed:
                continue
            late = self.write_late.get(dir_id)
            if late is not None:
                if self.writers.late(dir_id):
                    if now - late >= self.fail_s:
                        continue  # a write still running after fail.ms: a hung disk
                elif self.writers.error_of(dir_id):  # the late write failed after all
                    del self.write_late[dir_id]
                    self.write_failed.add(dir_id)
                    self.say(f"cannot write the state file on log dir id {dir_id}: "
                             f"{self.writers.error_of(dir_id)}; it leaves the ISRs")
                    continue
                # (else it returned: live, and written again at the next write)
            if self.writer_ready(w):
                self.not_ready_since.pop(w, None)
            elif now - self.not_ready_since.setdefault(w, now) >= self.grace_s:
                continue
            live.add(dir_id)
        return live

    def _take_results(self) -> None:
        for w, receiver in enumerate(self.results):
            if not receiver.has_unread():
                continue
            for m in receiver.poll():
                op, token = env.decode_op(m)
                what = self.pending.pop(token, None)
                if what is None:
                    continue
                try:
                    answer = env.decode_json(m)
                    error = int(answer.get("error", -1))
                except (ValueError, AttributeError, TypeError):
                    answer, error = {}, -1
                self.writer_answered(what, error, answer)
            if receiver.done():
                self.writer_bells[w].ring()  # it waits for space: always ring

    def writer_answered(self, what: tuple, error: int, answer: dict) -> None:
        kind = what[0]
        if kind == "state":
            _, key, told = what
            if error == ErrorCode.NONE and (told[0] == "leader" or answer.get("altered") is True):
                # it leads now, or took a changed config: handlers look again (one
                # generation bump a pass, however many replicas answered)
                self.moved = True
            if error != ErrorCode.NONE and self.sent.get(key) == told:
                del self.sent[key]  # sent again after RETRY_S
                if self.refused.get(key, (None,))[0] != told:
                    self.say(f"{key[0]}-{key[1]} on log dir id {key[2]}: "
                             f"{answer.get('message') or f'error {error}'}")
                self.refused[key] = (told, time.monotonic() + RETRY_S)
        else:
            if kind in ("delete", "stray") and error == ErrorCode.NONE:
                self.forget_replica(what[2])  # (before a new one can claim the slot)
            self.admin_answered(what, error, answer)

    # -- the pass ----------------------------------------------------------------
    def _pass(self, now: float) -> None:
        self.next_pass = now + PASS_INTERVAL_S
        if not self._scan():
            return  # no decision on a table not read: the next pass looks again
        if self.unsure:  # the start's decision, now that the replicas are known
            self.unsure = False
            self.frozen = bool(self.slots)
            if self.frozen:
                self.say(NO_COPY)
        self._prune()
        if not self.frozen:
            for _ in range(len(self.plan.log_dirs) + 1):
                live = self.live_dirs(now)
                changes = self._decide(live)
                if not changes:
                    break
                old = {tp: (p.leader, p.leader_epoch, list(p.isr), p.version)
                       for tp, p in self.doc.parts.items() if tp in changes}
                for tp, new in changes.items():
                    part = self.doc.parts[tp]
                    if new.leader != part.leader:
                        self.moved = True
                    part.leader, part.leader_epoch = new.leader, new.leader_epoch
                    part.isr, part.version = list(new.isr), part.version + 1
                if self.write_doc():
                    break
                for tp, (leader, epoch, isr, version) in old.items():  # not durable: undone
                    part = self.doc.parts[tp]
                    part.leader, part.leader_epoch, part.isr, part.version = (
                        leader, epoch, isr, version)
                if not self.writers_left(live):
                    break
            self._retry_failed(now)
            self._tell_replicas()
        if self.moved:
            self.moved = False
            self.bump_generation_soon()
        self._update_dirtable()

    def take_lock(self) -> bool:
        """Take the admin lock (release it with :meth:`taken_lock`): False, and
        nothing held, when it stays busy past ``admin.lock.timeout.ms`` (the
        work waits for a later round; never a crash)."""
        try:
            self.lock.acquire()
        except TimeoutError:
            return False
        return True

    @contextlib.contextmanager
    def taken_lock(self):
        """The admin lock :meth:`take_lock` took, released at the end."""
        try:
            yield
        finally:
            self.lock.release()

    def bump_generation_soon(self) -> None:
        """Bump the table's generation now, or at the next pass when the admin
        lock stays busy past ``admin.lock.timeout.ms`` (never a crash)."""
        try:
            with self.lock:
                self.table.bump_generation()
        except TimeoutError:
            self.moved = True

    def _decide(self, live: set[int]) -> dict:
        return elect.failover(
            ((tp, part, self.doc.configs.get(tp[0], {}), self.replica_live(tp, live))
             for tp, part in self.doc.parts.items() if tp[0] not in self.doc.deleting),
            self.blocked, bool(self.config["unclean.leader.election.enable"]))

    def write_doc(self) -> bool:
        """Write the document (seq + 1) on every online dir: True when durable (written
        on every dir it names online). A dir whose write fails joins ``write_failed``
        (out of ``live``); one whose write is late (past the timeout) joins
        ``write_late`` (out of the next documents' ``online``, out of ``live`` once
        late for ``logdirs.state.write.fail.ms``); one that failed or was late
        before and takes this write leaves them. A document past the limits is not
        written (``write_problem`` says why)."""
        from hostbroker.replication.localstate import new_history, size_problem

        offline = self.table.offline_log_dirs() | self.unidentified
        out = set(self.write_failed) | set(self.write_late)
        online = sorted(d for w, d in self.dirtable.ids().items()
                        if w not in offline and d not in out)
        retry = sorted(d for w, d in self.dirtable.ids().items()
                       if w not in offline and d in out)
        self.doc.seq += 1
        self.doc.online = online
        if not self.doc.history:  # (a document from before histories: of this lineage)
            self.doc.history = new_history()
        data = self.doc.encode()
        problem = size_problem(len(data), len(online), len(self.doc.refused), self.limits)
        if problem:
            self.doc.seq -= 1
            if problem != self.write_problem:
                self.say(f"cannot write the state file: {problem}")
            self.write_problem = problem
            return False
        self.write_problem = ""
        written = self.writers.write_bytes(data, online + retry)
        now = time.monotonic()
        for d in retry:
            if d in written:
                self.write_failed.discard(d)
                if self.write_late.pop(d, None) is not None:
                    self.say(f"the state file is written on log dir id {d} in time again")
        failed = set()
        for d in sorted(set(online + retry) - written):
            # late: still running, or not tried because the one before was (and it may
            # have returned since, without an error)
            if self.writers.late(d) or not self.writers.error_of(d):
                if d not in self.write_late:
                    self.write_late[d] = now
                    self.say(f"the state file write on log dir id {d} is late (over "
                             f"{self.writers.timeout_s * 1000:g} ms); it leaves the ISRs if "
                             f"its writes stay late for {self.fail_s * 1000:g} ms")
                if d in online:
                    failed.add(d)
            else:
                failed.add(d)
                if d not in self.write_failed:
                    self.say(f"cannot write the state file on log dir id {d}: "
                             f"{self.writers.error_of(d) or 'failed'}; it leaves the ISRs")
                self.write_failed.add(d)
                self.write_late.pop(d, None)
        failed &= set(online)
        return bool(online) and not failed

    def _retry_failed(self, now: float) -> None:
        """Every ``logdirs.state.retry.ms`` while a dir's state write failed (a
        full disk, an I/O error) and its writer has not flagged it offline: write
        the document it missed there again (same seq, the other dirs untouched).
        Once it takes it, a new document names it online: it is live again and
        its replicas catch up and rejoin the ISRs."""
        if not self.write_failed or now < self.retry_at:
            return
        self.retry_at = now + self.retry_s
        offline = self.table.offline_log_dirs() | self.unidentified
        ids = sorted(d for w, d in self.dirtable.ids().items()
                     if w not in offline and d in self.write_failed and d not in self.held)
        if ids and self.writers.write_bytes(self.doc.encode(), ids):
            self.write_doc()  # (takes the dirs written out of write_failed)

    def writers_left(self, live: set[int]) -> bool:
        """Whether a write can still be tried: some dir that is not failing."""
        return any(d not in self.write_failed and d not in self.write_late for d in live)

    def _update_dirtable(self) -> None:
        from hostbroker.shm.logdirs import LD_OFFLINE, LD_ONLINE, LD_REOPENING

        offline = self.table.offline_log_dirs() | self.unidentified
        counts = {d: [0, 0, 0, 0] for d in self.dirtable.ids().values()}
        for tp, slots in self.slots.items():
            part = self.doc.parts.get(tp)
            for d, slot in slots.items():
                c = counts.get(d)
                if c is None:
                    continue
                c[0] += 1
                if part is not None and part.leader == d:
                    c[1] += 1
                    if len(part.isr) < len(part.replicas):
                        c[2] += 1
                if self.slot_states[slot].state == ptable.OFFLINE:
                    c[3] += 1
        for w, d in self.dirtable.ids().items():
            s = self.dirtable.read(w)
            if w in self.reopening:
                state = LD_REOPENING
            else:  # (a dir that cannot take the state file holds no replica: offline)
                state = LD_OFFLINE if w in offline or d in self.write_failed else LD_ONLINE
            if w in offline:
                counts[d][3] = counts[d][0]
            new = (state, *counts[d])
            if (s.state, s.replicas, s.leaders, s.under_replicated, s.offline_replicas) != new:
                self.dirtable.write(w, state=state, replicas=counts[d][0], leaders=counts[d][1],
                                    under_replicated=counts[d][2],
                                    offline_replicas=counts[d][3])

    def new_part(self, replicas: list[int]) -> Part:
        """A new partition's entry: the first replica leads in epoch 0, all in the ISR."""
        return Part(list(replicas), replicas[0], 0, list(replicas), 0)

    def dir_path(self, dir_id: int) -> str | None:
        index = self.dirtable.index_of(dir_id)
        return None if index is None else self.plan.log_dirs[index]

    def device_of(self, dir_id: int) -> int:
        """The ``st_dev`` the dir had when the broker started (-1: unknown),
        never a stat now: a hung disk must not stall this loop."""
        index = self.dirtable.index_of(dir_id)
        devices = getattr(self.plan, "dir_devices", None) or ()
        return devices[index] if index is not None and index < len(devices) else -1
