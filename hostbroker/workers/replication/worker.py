"""The loop of ``hb-replica`` (what it owns, reads and writes: the package
docstring).

Each pass: take the writers' results off the ``rres`` rings (an append or a
truncation done: the partition fetches again from the log end the writer
says); read the partition table again when its generation moved or every
100 ms (a slot's role, leader or leader epoch changes without a new
generation), making a :class:`~.follows.Follow` for each FOLLOWER slot under
the :class:`~.fetcher.LeaderLink` of its leader; serve the sockets the
selector says are ready; let each link connect, time out or send its next
request; start the truncation of partitions that need one; send what is
queued for the writers and wake them. The loop sleeps on its doorbell and
the links' sockets until the next deadline (a backoff, a link's timeout, the
next table read).

An op sent to a writer that is replaced meanwhile (its epoch on the process
board moves; its rings were reset) is never answered: the partition backs
off and starts over from the table, as it does when a writer does not answer
within ``replica.socket.timeout.ms``. A replaced ``hb-replica`` leaves its
ops in the ``rapp`` rings (only its ``rres`` rings are reset): their answers
carry tokens below every one its replacement uses, and are ignored.
"""

from __future__ import annotations

import os
import selectors
import sys
import time

from hostbroker.errors import ErrorCode
from hostbroker.log.epochs import LeaderEpochCache
from hostbroker.log.segments import partition_dirname
from hostbroker.shm import procs
from hostbroker.shm.partitions import (
    ONLINE,
    PLACEMENT_LOG_DIRS,
    ROLE_FOLLOWER,
    PartitionTable,
)
from hostbroker.shm.peers import PeersTable
from hostbroker.shm.table import TornSlotError
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import Worker
from hostbroker.workers.replication.fetcher import LeaderLink, Settings
from hostbroker.workers.replication.follows import AT_WRITER, Follow, Stage
from hostbroker.workers.replication.truncation import Truncation

SCAN_INTERVAL_S = 0.1
WRITER_WAIT_S = 0.05  # how long a link's next FETCH waits for its appends' results
# the longest long poll of a FETCH sent while a partition of its link is at a writer
WRITER_WAIT_MS = round(WRITER_WAIT_S * 1000)
_IDLE_TIMEOUT_S = 1.0


class ReplicaWorker(Worker):
    kind = "replica"
    process_name = "hb-replica"

    @property
    def name(self) -> str:
        return self.process_name  # one per broker

    def init_process(self) -> None:
        super().init_process()
        plan = self.plan
        self.settings = Settings(self.config)
        self.table = PartitionTable.attach(plan.table_name, readonly=True)
        self.peers = PeersTable.attach(plan.peers_name, readonly=True)
        self.to_writers = [self.sender("rapp", 0, w) for w in range(plan.num_writers)]
        self.results = [self.receiver("rres", w, 0) for w in range(plan.num_writers)]
        self.writer_bells = [self.waker("writer", w) for w in range(plan.num_writers)]
        self.writer_slots = [plan.board_slot("writer", w) for w in range(plan.num_writers)]
        self.writer_epochs = [self.board.epoch(i) for i in self.writer_slots]
        self.links: dict[int, LeaderLink] = {}
        self.follows: dict[tuple[str, int], Follow] = {}
        self.pending: dict[int, Follow] = {}  # token -> the follow whose op is at a writer
        # Above every token a previous hb-replica of this broker used: its ops still
        # in the rapp rings are answered after it died, and must match nothing here.
        self.next_token = time.monotonic_ns()
        self.generation = -1
        self.next_scan = 0.0
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.doorbell.fileno(), selectors.EVENT_READ, None)
        self.board.set_state(self.slot, procs.WORKER_READY)

    # -- the loop ----------------------------------------------------------
    def run(self) -> None:
        sleeper = self.sleeper
        while not self.stopping:
            events = sleeper.sleep(self.selector.select, self._timeout())
            self.doorbell.drain()
            start = time.monotonic_ns()
            self.heartbeat()
            worked = self._cycle(events)
            if worked:
                self.work_ns += time.monotonic_ns() - start
        now = time.monotonic()
        for link in self.links.values():
            link.close(now)
        self.selector.close()

    def _timeout(self) -> float:
        if any(s.pending() for s in self.to_writers):
            return 0.01
        now = time.monotonic()
        wake = self.next_scan
        for link in self.links.values():
            at = link.wake_at()  # (a retry, a connect's or handshake's deadline, a request's)
            if at is not None:
                wake = min(wake, at)
        for follow in self.follows.values():
            if follow.stage is Stage.BACKOFF:
                wake = min(wake, follow.retry_at)
            elif follow.stage in AT_WRITER:
                since = follow.since
                wake = min(wake, since + (WRITER_WAIT_S if now - since < WRITER_WAIT_S
                                          else self.settings.timeout_s))
        return max(0.0, min(_IDLE_TIMEOUT_S, wake - now))

    def _cycle(self, events) -> bool:
        worked = self._take_results()
        self._writers_replaced()
        now = time.monotonic()
        for key, mask in events:
            if key.data is not None:
                worked = True
                key.data.on_ready(mask, now)
        if self.table.generation != self.generation or now >= self.next_scan:
            self._scan(now)
        self._advance(now)
        for link in list(self.links.values()):
            # a fetch waits for the link's appends (its next one would wait behind
            # a long poll), but not for a writer that is slow to answer: then it
            # long-polls no longer than that wait, so the partitions still at the
            # writer are in the next fetch soon after it answers
            at_writer = [f for f in link.follows.values() if f.stage in AT_WRITER]
            busy = any(now - f.since < WRITER_WAIT_S for f in at_writer)
            link.step(now, busy, WRITER_WAIT_MS if at_writer else None)
            link.sync()
            if not link.follows and link.sock is None:
                del self.links[link.leader]
        self._pump()
        return worked

    # -- the table ---------------------------------------------------------
    def _scan(self, now: float) -> None:
        """Follow every ONLINE FOLLOWER slot's leader and leader epoch; drop the rest.
        A replica placed on a log dir is not fetched: its writer copies its leader's
        files (``workers/writer_local.py``)."""
        self.generation = self.table.generation
        self.next_scan = now + SCAN_INTERVAL_S
        own = self.settings.broker_id
        wanted = {}
        try:
            slots = self.table.scan()
        except TornSlotError:  # a writer died mid-write; the supervisor repairs the slot
            return
        for i, s in slots:
            if s.state == ONLINE and s.role == ROLE_FOLLOWER and s.leader >= 0 \
                    and s.leader != own and s.placement != PLACEMENT_LOG_DIRS:
                wanted[(s.name, s.partition)] = (i, s)
        for key, follow in list(self.follows.items()):
            found = wanted.get(key)
            if found is None or (found[0], found[1].leader, found[1].leader_epoch) != (
                    follow.slot, follow.leader, follow.leader_epoch):
                self._drop(follow)
        for key, (i, s) in wanted.items():
            if key in self.follows:
                continue
            follow = Follow(slot=i, topic=s.name, partition=s.partition, owner=s.owner,
                            leader=s.leader, leader_epoch=s.leader_epoch)
            self.follows[key] = follow
            link = self.links.get(s.leader)
            if link is None:
                link = self.links[s.leader] = LeaderLink(s.leader, self.settings, self,
                                                         self.peers.get, self.selector)
            link.follows[key] = follow

    def _drop(self, follow: Follow) -> None:
        follow.dropped = True
        self.follows.pop(follow.key, None)
        self.pending.pop(follow.token, None)
        link = self.links.get(follow.leader)
        if link is not None and link.follows.get(follow.key) is follow:
            del link.follows[follow.key]

    def _advance(self, now: float) -> None:
        """Partitions past their backoff start over; those at the start of an
        epoch get their truncation's first step; ops a writer never answered
        time out."""
        for follow in list(self.follows.values()):
            if follow.stage is Stage.BACKOFF and now >= follow.retry_at:
                follow.stage = Stage.EPOCH
            if follow.stage is Stage.EPOCH and follow.truncation is None:
                self._start_truncation(follow)
            elif follow.stage in AT_WRITER and now - follow.since > self.settings.timeout_s:
                self.pending.pop(follow.token, None)
                self.failed(follow, f"writer {follow.owner} did not answer within "
                                    "replica.socket.timeout.ms")

    def _start_truncation(self, follow: Follow) -> None:
        try:
            s = self.table.read(follow.slot)
        except TornSlotError:  # its writer died mid-write; the supervisor repairs it
            self.failed(follow, "its partition slot is being repaired")
            return
        if s.state != ONLINE or (s.name, s.partition) != follow.key:
            self._drop(follow)  # the next scan sees what the slot holds now
            return
        try:
            entries = self._own_epochs(follow)
        except Exception as e:  # noqa: BLE001 - a damaged file: the writer says so too
            self.failed(follow, f"its leader-epoch-checkpoint cannot be read: {e}")
            return
        follow.offset = s.end_offset
        follow.truncation = Truncation(entries, s.end_offset, s.high_watermark)
        step = follow.truncation.first()
        if step.cut is not None:
            self.truncate(follow, step.cut)
        # else: asked in the link's next request (truncation.asked is set)

    def _own_epochs(self, follow: Follow) -> list[tuple[int, int]]:
        path = os.path.join(self.plan.log_dirs[follow.owner],
                            partition_dirname(follow.topic, follow.partition))
        return list(LeaderEpochCache.load(path).entries)

    # -- what the links decide (fetcher.Sink) ----------------------------------
    def truncate(self, follow: Follow, offset: int) -> None:
        follow.truncation = None
        if offset == follow.offset:  # nothing to cut: fetch from the log end
            follow.stage = Stage.FETCH
            return
        token = self._token(follow, Stage.TRUNCATING)
        self._send(follow.owner, *env.encode_truncate(token, {
            "slot": follow.slot, "topic": follow.topic, "partition": follow.partition,
            "leader_epoch": follow.leader_epoch, "offset": offset}))

    def restart(self, follow: Follow, offset: int) -> None:
        """The leader's log starts at ``offset``, past our log end: the writer
        empties the log and starts it there."""
        token = self._token(follow, Stage.RESTARTING)
        self._send(follow.owner, *env.encode_restart_log(token, {
            "slot": follow.slot, "topic": follow.topic, "partition": follow.partition,
            "leader_epoch": follow.leader_epoch, "offset": offset}))

    def append(self, follow: Follow, data_epoch: int, leader_hw: int, data) -> None:
        token = self._token(follow, Stage.APPENDING)
        follow.hw_sent = leader_hw
        self._send(follow.owner, *env.encode_replica_append(env.ReplicaAppend(
            token, follow.slot, follow.topic, follow.partition, follow.leader_epoch,
            data_epoch, follow.offset, leader_hw, data)))

    def failed(self, follow: Follow, why: str | None) -> None:
        """Back ``follow`` off; say ``why`` for the first error of a run (None:
        its connection failed, which the link says itself)."""
        self.pending.pop(follow.token, None)
        follow.back_off(time.monotonic(), self.settings.backoff_s, counted=why is not None)
        if follow.errors == 1 and why is not None:  # a success resets the count
            self.count(procs.ERRORS)
            self._say(f"{follow.topic}-{follow.partition} from broker {follow.leader} "
                      f"(leader epoch {follow.leader_epoch}): {why}; trying again every "
                      f"{self.settings.backoff_s * 1000:.0f} ms")

    def link_failed(self, link: LeaderLink, why: str) -> None:
        self.count(procs.ERRORS)
        if not link.said:
            link.said = True
            self._say(f"{why}; trying again every {self.settings.backoff_s * 1000:.0f} ms")

    def _say(self, line: str) -> None:
        print(f"hostbroker: {self.name}: {line}", file=sys.stderr, flush=True)

    # -- the writers -------------------------------------------------------
    def _token(self, follow: Follow, stage: Stage) -> int:
        token = self.next_token
        self.next_token += 1
        self.pending.pop(follow.token, None)
        follow.token = token
        follow.stage = stage
        follow.since = time.monotonic()
        self.pending[token] = follow
        return token

    def _send(self, writer: int, *parts) -> None:
        self.to_writers[writer].send(*parts)

    def _pump(self) -> None:
        for w, sender in enumerate(self.to_writers):
            if sender.pending():
                sender.pump()
                self.writer_bells[w].wake()

    def _writers_replaced(self) -> None:
        """A replaced writer's ``rapp`` ring was reset with what it held: what
        we had sent it will never be answered, so those partitions start over."""
        for w, slot in enumerate(self.writer_slots):
            epoch = self.board.epoch(slot)
            if epoch == self.writer_epochs[w]:
                continue
            self.writer_epochs[w] = epoch
            for follow in list(self.follows.values()):
                if follow.owner == w and follow.stage in AT_WRITER:
                    self.failed(follow, f"writer {w} was replaced")

    def _take_results(self) -> bool:
        worked = False
        for w, receiver in enumerate(self.results):
            if not receiver.has_unread():
                continue
            worked = True
            for m in receiver.poll():
                self._result(m)
            if receiver.done():
                self.writer_bells[w].ring()  # it waits for space: always ring
        return worked

    def _result(self, m) -> None:
        op, token = env.decode_op(m)
        follow = self.pending.pop(token, None)
        if follow is None or follow.dropped or follow.token != token:
            return  # a dropped partition's, or one that timed out
        follow.token = 0
        if op == env.OP_REPLICA_APPEND and follow.stage is Stage.APPENDING:
            _, error, log_end = env.decode_replica_append_result(m)
            what = "append"
        elif op == env.OP_TRUNCATE and follow.stage is Stage.TRUNCATING:
            answer = env.decode_json(m)
            error, log_end = answer.get("error", -1), answer.get("log_end", -1)
            what = "truncation"
        elif op == env.OP_RESTART_LOG and follow.stage is Stage.RESTARTING:
            answer = env.decode_json(m)
            error, log_end = answer.get("error", -1), answer.get("log_end", -1)
            what = "log restart"
        else:
            return
        if error != ErrorCode.NONE or not isinstance(log_end, int) or log_end < 0:
            self.failed(follow, f"writer {follow.owner} refused the {what} at "
                                f"{follow.offset}: {_name(error)}")
            return
        self.count(procs.REQUESTS)
        if what == "append":
            self.count(procs.BYTES_IN, max(0, log_end - follow.offset))
            follow.restarted = False
        elif what == "log restart":
            follow.restarted = True  # (the writer says so in its log)
        follow.offset = log_end
        follow.stage = Stage.FETCH
        follow.errors = 0


def _name(code) -> str:
    try:
        return ErrorCode(code).name
    except (ValueError, TypeError):
        return f"error {code}"
