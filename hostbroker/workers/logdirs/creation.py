"""hb-logdirs' creations: the replicas it makes, a few per round of its loop.

Mixin of :class:`~hostbroker.workers.logdirs.worker.LogDirsWorker` (through
:class:`~hostbroker.workers.logdirs.admin.Admin`). Making a replica
(``replica_slots.create_replica``: mkdir, files, fsyncs, a slot claimed
STOPPED) costs disk time, so it is done under the admin lock for at most
``logdirs.create.round.ms`` at a time (one replica at least), the loop's
failover pass and ISR commits between:

- a topic's creation (``create``): its config normalized (kept as the broker
  reads it), placed (``replication/dirplacement.place_replicas`` over the
  live dirs), refused when the document would pass
  ``logdirs.state.max.bytes``; its replicas made, and only then the topic
  written into the document (so it exists, durable) and the request
  answered. One that fails, or a crash in the middle, leaves replicas the
  document does not assign: strays, deleted (while the document is certain).
  The first creation of a broker writes the (empty) document first, so that a
  restart finds one and does not freeze those strays.
- a replica the document assigns to a live dir that holds none
  (:meth:`Creations._give_back`): a reassignment's new replicas, and an empty
  one for a dir that lost its partition dir once the ISR no longer names it;
  the document already holds them, so a crash leaves nothing to clean.
"""

from __future__ import annotations

import collections
import dataclasses
import time

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.shm import partitions as ptable


def answer(code: int, message: str = "", results=()) -> dict:
    """An OP_LOCAL_ADMIN answer."""
    return {"error": int(code), "message": message, "results": [list(r) for r in results]}


@dataclasses.dataclass
class _Creation:
    """A topic being created: its replicas are made a few per round."""

    topic: str
    config: dict[str, str]  # normalized
    parts: dict  # p -> its document entry (Part), written once every replica is made
    h: int  # who waits for the answer (handler, token)
    token: int
    todo: collections.deque = dataclasses.field(default_factory=collections.deque)
    made: int = 0  # replicas made (or tried) so far
    checked: bool = False  # no plain topic of that name (looked under the lock)
    failed: str = ""
    # the topic's config before an ALTER_TOPIC that adds these partitions to it
    # (topic_changes.py); None: a new topic
    old_config: dict[str, str] | None = None

    def __post_init__(self):
        self.todo.extend((p, d) for p, part in sorted(self.parts.items()) for d in part.replicas)


class Creations:
    """Mixin: the replicas hb-logdirs makes (see the module docstring)."""

    def init_creations(self) -> None:
        self.creating: dict[str, _Creation] = {}  # topic -> its creation, oldest first
        self.missing_left = False  # a replica to give back waits for the next round
        self.create_round_s = self.config["logdirs.create.round.ms"] / 1000
        self.lost_tried: dict[tuple, int] = {}  # (t, p, dir) -> writer epoch of the last try

    def _exists(self, topic: str) -> bool:
        return topic in self.doc.configs or topic in self.creating or any(
            s.name == topic and s.state != ptable.FREE for _, s in self.table.scan())

    def _create(self, topic: str, partitions: int, rf: int, config: dict,
                h: int = 0, token: int = 0) -> dict | None:
        """Check and place a new topic, then create its replicas (see
        :meth:`_create_step`): the answer when it is done within this round (or
        refused), else None (answered to ``h``, ``token`` once it is)."""
        from hostbroker.log.segments import validate_topic_name
        from hostbroker.replication.dirplacement import place_replicas

        validate_topic_name(topic)
        if rf == -1:
            rf = self.config["default.replication.factor"]
        if not 1 <= rf <= ptable.MAX_REPLICAS:
            return answer(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor {rf} must be 1 to {ptable.MAX_REPLICAS}")
        limit = self.config["max.partitions.per.topic"]
        if not 1 <= partitions <= limit:
            return answer(ErrorCode.INVALID_REQUEST, f"partitions must be between 1 and {limit}")
        try:
            log_config = self.defaults.with_overrides({str(k): v for k, v in config.items()})
        except HostbrokerError as e:
            return answer(ErrorCode.INVALID_CONFIG, str(e))
        # stored as the broker reads them ("0060000 " is 60000), not as the client wrote them
        config = log_config.overrides_of(str(k) for k in config)
        if log_config.min_insync_replicas > rf:
            return answer(ErrorCode.INVALID_CONFIG,
                          f"min.insync.replicas {log_config.min_insync_replicas} is more than "
                          f"the replication factor {rf}")
        if self._exists(topic):
            return answer(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic} already exists")
        live = self.live_dirs(time.monotonic())
        loads = self._loads(live)
        try:
            placed = place_replicas(loads, list(range(partitions)), rf)
        except ValueError as e:
            return answer(ErrorCode.INVALID_REPLICATION_FACTOR, str(e))
        job = _Creation(topic, config, {p: self.new_part(r) for p, r in placed.items()}, h, token)
        problem = self._too_long(job)
        if problem:
            return answer(ErrorCode.INVALID_REQUEST, f"refused: {problem}")
        if self.doc.seq == 0 and not self.write_doc():
            # (a document on disk first, even empty: a restart that finds replicas and
            # no state file freezes them; one that finds a document deletes them)
            return self._not_written()
        self.creating[topic] = job
        return self._create_step(job, time.monotonic() + self.create_round_s)

    def _too_long(self, job: _Creation) -> str | None:
        """Why the document with ``job``'s topic in it could not be written (past
        ``logdirs.state.max.bytes``), else None: refused before anything is made."""
        from hostbroker.replication.localstate import size_problem

        doc = self.doc
        doc.configs[job.topic] = job.config
        doc.parts.update(((job.topic, p), part) for p, part in job.parts.items())
        try:
            size = len(doc.encode())
        finally:
            self._unplace(job)
        return size_problem(size, len(doc.online), len(doc.refused), self.limits)

    def _create_step(self, job: _Creation, deadline: float) -> dict | None:
        """Create ``job``'s next replicas (STOPPED, not in the document yet) under the
        admin lock until ``deadline`` (one at least), then let the loop go on (its
        failover pass, the ISR commits); once every one is there, write the
        document: the topic exists, and the answer is returned. A crash before that
        leaves replicas the document does not assign: strays, deleted at the next
        start. A replica that cannot be made ends the creation: those made are
        strays, deleted, and the answer says why."""
        from hostbroker.workers.replica_slots import PLACEMENT_LOG_DIRS

        if not self.take_lock():
            return None  # the admin lock busy: the next round goes on
        with self.taken_lock():
            if not job.checked:
                job.checked = True
                if any(s.name == job.topic and s.state != ptable.FREE
                       and s.placement != PLACEMENT_LOG_DIRS for _, s in self.table.scan()):
                    # a handler created a plain topic of that name since the check
                    job.failed = f"topic {job.topic} already exists"
            made = job.made
            while job.todo and not job.failed:
                p, d = job.todo.popleft()
                part = job.parts[p]
                failed = self._create_replica(job.topic, p, part, job.config, d)
                job.made += 1
                if failed:
                    job.failed = failed
                if time.monotonic() >= deadline:
                    break
            if job.made > made:
                self.table.bump_generation()  # (slots claimed: whoever reads the table looks)
        if job.todo and not job.failed:
            return None
        del self.creating[job.topic]
        return self._created(job)

    def _unplace(self, job: _Creation) -> None:
        """The document without ``job``'s partitions, and with the config its
        topic had before (none for a new topic)."""
        if job.old_config is None:
            del self.doc.configs[job.topic]
        else:
            self.doc.configs[job.topic] = job.old_config
        for p in job.parts:
            del self.doc.parts[(job.topic, p)]

    def _created(self, job: _Creation) -> dict:
        """The end of a creation: the document written (the topic exists, or
        has its new partitions), or the replicas made left as strays."""
        topic = job.topic
        if job.failed:
            if job.old_config is not None:
                self.say(f"topic {topic}: {job.failed}; its partitions are not added")
                return answer(ErrorCode.STORAGE_ERROR, job.failed)
            self.say(f"topic {topic}: {job.failed}; it is not created")
            # (nothing made: a plain topic of that name came first)
            return answer(ErrorCode.STORAGE_ERROR if job.made
                          else ErrorCode.TOPIC_ALREADY_EXISTS, job.failed)
        self.doc.configs[topic] = job.config
        for p, part in job.parts.items():
            self.doc.parts[(topic, p)] = part
        if not self.write_doc():
            self._unplace(job)
            self.write_back()
            return self._not_written()
        self.bump_generation_soon()
        return answer(ErrorCode.NONE, "", [(topic, p, ErrorCode.NONE) for p in sorted(job.parts)])

    def _loads(self, live: set[int]) -> dict:
        """``DirLoad`` of each configured dir from the partition table (usable: in
        ``live``)."""
        from hostbroker.replication.dirplacement import DirLoad

        ids = self.dirtable.ids()
        every = set(ids.values()) | live
        replicas = {d: 0 for d in every}
        leaders = {d: 0 for d in every}
        size = {d: 0 for d in every}
        for _, s in self.table.scan():
            d = ids.get(s.owner)
            if d not in replicas or s.state == ptable.FREE:
                continue
            replicas[d] += 1
            size[d] += max(0, s.end_offset - s.start_offset)
            if s.role == ptable.ROLE_LEADER or s.role == ptable.ROLE_PLAIN:
                leaders[d] += 1
        return {d: DirLoad(replicas[d], leaders[d], size[d], self.device_of(d), d in live)
                for d in every}

    def _create_replica(self, topic: str, p: int, part, config: dict, d: int) -> str:
        """Create ``topic``-``p``'s replica on dir ``d`` (admin lock held): "" or why not."""
        from hostbroker.workers.replica_slots import PLACEMENT_LOG_DIRS, create_replica

        index = self.dirtable.index_of(d)
        try:
            if index is None:
                raise HostbrokerError(f"log dir id {d} is not configured", ErrorCode.STORAGE_ERROR)
            create_replica(self.table, self.commits, self.plan.log_dirs[index], index, topic, p,
                           part.replicas, config, self.defaults, PLACEMENT_LOG_DIRS,
                           leader=part.leader, leader_epoch=part.leader_epoch)
        except HostbrokerError as e:
            return f"{topic}-{p} on log dir id {d}: {e}"
        return ""

    def write_back(self) -> None:
        """After a write that was not durable, the document put back as it was:
        write it again, so that a dir that took the failed write keeps no copy
        of the change undone (a restart from it would bring the change back).
        Nothing when the write was refused as too long (nothing was written)."""
        if not self.write_problem:
            self.write_doc()

    def creation_due(self) -> bool:
        """Whether replicas wait to be created (the loop then does not sleep)."""
        return bool(self.creating) or self.missing_left

    def _creations_round(self, deadline: float) -> None:
        """Each round, the creations under way go on until ``deadline``."""
        for job in list(self.creating.values()):
            if time.monotonic() >= deadline:
                break
            answer = self._create_step(job, deadline)
            if answer is not None:
                self.reply(job.h, job.token, answer)

    def _give_back(self, live: set[int], deadline: float) -> None:
        """Make the replicas the document assigns to a live dir that has none: a
        reassignment's new ones, and an empty one for a dir that lost its partition
        dir once the ISR no longer names it. Under the admin lock until ``deadline``
        (one at least); the rest in the next rounds."""
        lost = []
        for tp, part in self.doc.parts.items():
            if tp[0] in self.doc.deleting:
                continue
            slots = self.slots.get(tp, {})
            for d in part.replicas:
                if d not in live or d in slots or d in part.isr:
                    continue
                w = self.dirtable.index_of(d)
                if w is not None and self.lost_tried.get((tp[0], tp[1], d)) != \
                        self.writer_epochs[w]:
                    lost.append((tp, part, d, w))
        self.missing_left = False
        if not lost:
            return
        if not self.take_lock():
            self.missing_left = True  # the admin lock busy: the next round
            return
        with self.taken_lock():
            for i, (tp, part, d, w) in enumerate(lost):
                if i and time.monotonic() >= deadline:
                    self.missing_left = True
                    break
                self.lost_tried[(tp[0], tp[1], d)] = self.writer_epochs[w]
                failed = self._create_replica(tp[0], tp[1], part,
                                              self.doc.configs.get(tp[0], {}), d)
                if failed:
                    self.say(f"cannot make a replica: {failed}")
            self.table.bump_generation()
        self._scan()
