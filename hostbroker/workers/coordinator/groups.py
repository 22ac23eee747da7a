"""The consumer group coordinator (part of ``hb-coordinator``).

Owns: the broker's one :class:`~hostbroker.coordinator.Coordinator` (every
group's members, generations and assignment, docs/spec/groups.md), the joins
waiting for their rebalance (by handler and token), and ``__groups.log`` in
the first log dir (:mod:`hostbroker.coordinator.store`), the state's copy for a
coordinator that replaces this one.

It lives next to the consumer offsets store (``offsets.py``), so the fence
of an OFFSET_COMMIT (:meth:`GroupHost.fence`) and the storing of that commit
run in one process, one after the other, with no other request in between.

Handlers send group requests as ``OP_GROUP`` json ops on the ``capp`` rings;
:meth:`GroupHost.handle` answers them, or keeps a JOIN_GROUP that must wait
for its rebalance: its answer comes out of :meth:`GroupHost.tick` (which the
coordinator calls once per loop pass) when the rebalance completes. ``tick`` also
ends sessions and rebalance waits on time (``expire`` at ``next_deadline``),
tells the state when a topic's partition count changed and appends the
groups that changed to ``__groups.log``.

A topic's partition count: for a replicated topic (cluster mode), the
partition count of its assignment in ZooKeeper, as the registrar publishes
it (:class:`~hostbroker.shm.topicnames.ReplicatedNames`, read whenever its
``seq`` moves): this broker holds replicas of only some of its partitions,
and a group deals out all of them. Any other topic, and a replicated one
whose count is not known (its node could not be read, or the published list
is INCOMPLETE, or none was published yet): one more than the highest
partition of this broker's partition table (read whenever its generation
moves). A replicated topic missing from a whole published list (one the
registrar has not read yet: just created, its replicas claimed here first)
has no count until the registrar publishes it: the replicas this broker
holds are a part of the topic, and a rebalance on that part would deal out
fewer partitions than the topic has (a topic grown from 2 to 5 partitions
dealt as 4). That wait has no end of its own (a registrar that cannot read
ZooKeeper publishes nothing): a topic held here that waits longer than
:data:`UNLISTED_SAY_MS` is said once in the log. A count over
``max.partitions`` is cut there (said once).
While the registrar is writing (or died writing) the counts read before
stand.

Time is ``time.monotonic()`` in milliseconds, one clock for every process of
the host. A coordinator started with the broker empties ``__groups.log``
(members of the last run rejoin on UNKNOWN_MEMBER_ID); a replacement (a later
epoch) loads it and restarts every member's session, since heartbeats it did
not see went to the dead one.
"""

from __future__ import annotations

import os
import sys
import time

from hostbroker.coordinator import Coordinator, Limits, Pending
from hostbroker.coordinator.state import GroupPhase
from hostbroker.coordinator.store import FILENAME, GroupStore
from hostbroker.errors import ErrorCode
from hostbroker.shm import partitions as ptable
from hostbroker.shm.topicnames import COMPLETE, ReplicatedNames, name_hash

STATE_FILE = FILENAME
_LIVE = (ptable.ONLINE, ptable.OFFLINE, ptable.CREATING)
UNLISTED_SAY_MS = 30_000  # a replicated topic held here, not in the whole list: said after


def limits_of(config) -> Limits:
    return Limits(max_members=config["group.max.members"],
                  max_groups=config["group.max.groups"],
                  min_session_timeout_ms=config["group.min.session.timeout.ms"],
                  max_session_timeout_ms=config["group.max.session.timeout.ms"],
                  max_rebalance_timeout_ms=config["group.max.rebalance.timeout.ms"],
                  max_topics_per_member=config["group.max.topics.per.member"],
                  max_streams=config["group.max.streams"],
                  rebalance_burst=config["group.rebalance.burst"],
                  rebalance_min_interval_ms=config["group.rebalance.min.interval.ms"],
                  max_partitions=config["max.partitions"])


def _clock() -> float:
    return time.monotonic() * 1000


def _streams(assignment) -> list:
    """``{topic: [partitions of each stream]}`` as ``[[topic, stream, partitions]]``."""
    return [[topic, index, list(parts)] for topic, streams in sorted(assignment.items())
            for index, parts in enumerate(streams)]


class GroupHost:
    """The group coordinator of ``hb-coordinator`` (see the module docstring)."""

    def __init__(self, config, table, log_dir: str, broker_id: int, replacement: bool,
                 name: str = "hb-coordinator", names: ReplicatedNames | None = None):
        self.table = table
        self.names = names
        self.path = os.path.join(log_dir, STATE_FILE)
        self.name = name
        self.limits = limits_of(config)
        self.state = Coordinator(self.limits, broker_id)
        self.waiting: dict[tuple[str, str], list[tuple[int, int]]] = {}  # -> (handler, token)
        self.seen: tuple[int, int] | None = None  # (table generation, names seq) counted
        self.replicated: dict[str, int] = {}  # the last replicated counts read
        # the name hashes of the last whole list of replicated topics read (None: none)
        self.listed: frozenset[int] | None = None
        self.said_over: set[str] = set()  # topics said to be over max.partitions
        # replicated topics held here that wait for the registrar's list -> since (ms)
        self.unlisted: dict[str, float] = {}
        self.said_unlisted: set[str] = set()
        self.touched = False  # something may have changed the groups since the last save
        if replacement:
            self.store = GroupStore.take_over(log_dir, self.state, _clock(), self._log)
        else:
            self.store = GroupStore.start(log_dir, self.limits, self._log)
        self.state.changed()  # what was loaded is what the store holds

    def _log(self, line: str) -> None:
        print(f"hostbroker: {self.name}: {line}", file=sys.stderr, flush=True)

    # -- requests ------------------------------------------------------------
    def handle(self, handler: int, token: int, request: dict) -> dict | None:
        """The answer to one group request, or None for a join that waits."""
        op, now, state = request["op"], _clock(), self.state
        self.touched = True
        self._partition_counts(now)  # a topic created just before this request counts
        if op == "join":
            answer = state.join(now, request["group"], request["member_id"],
                                request["client_id"], request["session_timeout_ms"],
                                request["rebalance_timeout_ms"], request["topics"])
            if isinstance(answer, Pending):
                self.waiting.setdefault((request["group"], answer.member_id), []).append(
                    (handler, token))
                return None
            return self._join_result(answer)
        if op == "sync":
            answer = state.sync(now, request["group"], request["generation"], request["member_id"])
            return {"error": int(answer.error), "assignment": _streams(answer.assignment)}
        if op == "heartbeat":
            return {"error": int(state.heartbeat(now, request["group"], request["generation"],
                                                 request["member_id"]))}
        if op == "leave":
            return {"error": int(state.leave(now, request["group"], request["member_id"]))}
        if op == "describe":
            state.expire(now)
            return self._describe(request["group"])
        if op == "list":
            state.expire(now)
            return {"error": 0, "groups": sorted(state.groups)}
        return {"error": int(ErrorCode.INVALID_REQUEST)}

    @staticmethod
    def _join_result(answer) -> dict:
        return {"error": int(answer.error), "generation": answer.generation,
                "member_id": answer.member_id, "members": list(answer.members)}

    def _describe(self, group: str) -> dict:
        described = self.state.describe(group)
        if described is None:
            return {"error": 0, "phase": GroupPhase.EMPTY.value, "generation": 0, "members": []}
        return {"error": 0, "phase": described["phase"], "generation": described["generation"],
                "members": [[mid, m["client_id"], m["session_timeout_ms"],
                             _streams(m["assignment"])]
                            for mid, m in described["members"].items()]}

    def fence(self, group: str, generation: int, member_id: str) -> ErrorCode:
        """Whether a commit from ``(generation, member_id)`` may be stored now."""
        self.touched = True  # it expires what is due
        return self.state.commit_allowed(_clock(), group, generation, member_id)

    # -- the loop --------------------------------------------------------------
    def tick(self) -> list[tuple[int, int, dict]]:
        """Partition counts, expiry and persistence; ``(handler, token, result)``
        of every waiting join the state answered since the last tick."""
        now = _clock()
        self._partition_counts(now)
        deadline = self.state.next_deadline()
        if deadline is not None and deadline <= now:
            self.state.expire(now)
            self.touched = True
        out = []
        for group, member_id, answer in self.state.completed():
            result = self._join_result(answer)
            for handler, token in self.waiting.pop((group, member_id), ()):
                out.append((handler, token, result))
        self._save_if_changed()
        return out

    def timeout_s(self) -> float | None:
        deadline = self.state.next_deadline()
        return None if deadline is None else max(0.0, (deadline - _clock()) / 1000)

    def _partition_counts(self, now: float) -> None:
        self._say_unlisted(now)
        seen = (self.table.generation, -1 if self.names is None else self.names.seq)
        if seen == self.seen:
            return
        self.seen = seen
        counts: dict[str, int] = {}
        replicas: dict[str, int] = {}  # topics of ZooKeeper whose replicas are held here
        for _, s in self.table.scan():
            if s.state in _LIVE:
                into = replicas if s.replicated and not s.dirs_placed else counts
                into[s.name] = max(into.get(s.name, 0), s.partition + 1)
        # an odd seq: the registrar is writing (or died writing): the counts read
        # before stand until the seq moves again, with no wait here
        if self.names is not None and seen[1] & 1 == 0:
            replicated = self.names.partition_counts()
            if replicated is not None:
                state, hashes = self.names.snapshot()
                self.listed = hashes if state == COMPLETE else None
                self.replicated = self._bounded(replicated)
        for topic, count in replicas.items():
            # this broker's part of the topic counts only when the registrar's
            # list cannot give the whole (see the module docstring)
            if self.listed is None or name_hash(topic) in self.listed:
                counts[topic] = max(counts.get(topic, 0), count)
        counts.update(self.replicated)
        self._unlisted(now, replicas.keys() - counts.keys())
        known = self.state.partitions
        self.touched = True
        for topic in known.keys() - counts.keys():
            self.state.partitions_changed(now, topic, 0)
        for topic, count in counts.items():
            if known.get(topic) != count:
                self.state.partitions_changed(now, topic, count)

    def _unlisted(self, now: float, waiting) -> None:
        """The replicated topics held here that have no count now (module
        docstring): since when each waits (a topic counted since, and said,
        is said again should it wait again)."""
        self.unlisted = {t: self.unlisted.get(t, now) for t in waiting}
        self.said_unlisted &= self.unlisted.keys()

    def _say_unlisted(self, now: float) -> None:
        for topic, since in self.unlisted.items():
            if now - since >= UNLISTED_SAY_MS and topic not in self.said_unlisted:
                self.said_unlisted.add(topic)
                self._log(f"replicated topic {topic[:80]!r} held here is not in the "
                          f"registrar's list after {(now - since) / 1000:.0f} s; its "
                          "partitions are not dealt out to group members until it is")

    def _bounded(self, replicated: dict[str, int]) -> dict[str, int]:
        """The replicated topics' counts the state takes: known ones (0 is not),
        at most ``max.partitions`` (the most a group's state may hold; the
        partitions above are not dealt out, said once per topic)."""
        limit = self.limits.max_partitions
        self.said_over &= replicated.keys()  # a topic deleted and made again is said again
        out = {}
        for topic, count in replicated.items():
            if count > limit and topic not in self.said_over:
                self.said_over.add(topic)
                self._log(f"replicated topic {topic[:80]!r} has {count} partitions, over "
                          f"max.partitions ({limit}); partitions from {limit} on are not "
                          "assigned to group members")
            if count > 0:
                out[topic] = min(count, limit)
        return out

    def close(self) -> None:
        """Close the state file (what changed is in it: each pass saves)."""
        self.store.close()

    def _save_if_changed(self) -> None:
        """Append the groups that changed to the state file (heartbeats change
        nothing kept: a replacement restarts every session anyway)."""
        if not self.touched:
            return
        self.touched = False
        changed = self.state.changed()
        if changed:
            self.store.save(self.state, changed)
