"""The consumer group state machine of docs/spec/groups.md: pure, clock injected.

:class:`Coordinator` owns every group of one broker: its members (id, client
id, session and rebalance timeouts, subscription ``{topic: streams}``, last
heartbeat), its phase (:class:`GroupPhase`), its generation and the
generation's assignment, computed by the broker itself with the range
assignment of docs/spec/zookeeper.md (:func:`hostbroker.cluster.rebalance.assign_group`),
so both modes split partitions the same way.

Every operation takes ``now`` (milliseconds of a clock that the caller
chooses and keeps monotonic, e.g. ``time.monotonic() * 1000``, which all
processes of a host share), first expires what ``now`` has ended (sessions,
the rebalance wait), then returns what to answer. A JOIN_GROUP that must wait
for the rebalance returns :class:`Pending`; when the rebalance completes
(during any later call, or :meth:`Coordinator.expire`) the answers of every
waiting join are queued, and :meth:`Coordinator.completed` hands them out.
:meth:`Coordinator.next_deadline` says when :meth:`Coordinator.expire` has
work to do. :meth:`Coordinator.to_records` / :meth:`Coordinator.from_records`
give the whole state as plain JSON-able data, for a process that replaces
the one holding it.

Nothing here does I/O, sleeps or reads a clock.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from hostbroker.cluster.rebalance import assign_group
from hostbroker.errors import ErrorCode

NO_GENERATION = -1
_MEMBER_ID_BYTES = 255


class GroupPhase(str, enum.Enum):
    EMPTY = "EMPTY"  # no members (a group in this phase is forgotten at once)
    PREPARING_REBALANCE = "PREPARING_REBALANCE"  # waiting for the members to (re)join
    STABLE = "STABLE"  # a generation and its assignment; members sync and heartbeat


@dataclass(frozen=True)
class Limits:
    """The broker's bounds on groups; each field names the setting that sets it."""

    max_members: int = 1000  # group.max.members
    max_groups: int = 10000  # group.max.groups
    min_session_timeout_ms: int = 500  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 300000  # group.max.session.timeout.ms
    max_rebalance_timeout_ms: int = 300000  # group.max.rebalance.timeout.ms
    max_topics_per_member: int = 1000  # group.max.topics.per.member


@dataclass(frozen=True)
class JoinAnswer:
    """A JOIN_GROUP answer; ``generation`` -1 and no members on an error."""

    error: ErrorCode
    generation: int = NO_GENERATION
    member_id: str = ""
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pending:
    """A join that waits for the rebalance; its answer comes from ``completed()``."""

    member_id: str


@dataclass(frozen=True)
class SyncAnswer:
    """A SYNC_GROUP answer: ``{topic: [partitions of stream 0, of stream 1, ...]}``."""

    error: ErrorCode
    assignment: Mapping[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)


@dataclass
class Member:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: dict[str, int]
    last_heartbeat: float
    joined: bool = False  # has (re)joined the rebalance in progress: its join waits


@dataclass
class Group:
    name: str
    phase: GroupPhase = GroupPhase.EMPTY
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline: float | None = None
    # the generation's assignment: member -> topic -> partitions of each stream
    assignment: dict[str, dict[str, list[list[int]]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # partitions it was computed with
    generation_members: tuple[str, ...] = ()


def _default_member_id(client_id: str) -> str:
    prefix = (client_id or "consumer").encode("utf-8", "replace")[:_MEMBER_ID_BYTES - 33]
    return f"{prefix.decode('utf-8', 'ignore')}-{uuid.uuid4().hex}"


class Coordinator:
    """Every consumer group of one broker. See the module docstring."""

    def __init__(self, limits: Limits = Limits(), broker_id: int = 0,
                 partitions: Mapping[str, int] | None = None,
                 new_member_id: Callable[[str], str] = _default_member_id):
        self.limits = limits
        self.broker_id = broker_id
        self.partitions: dict[str, int] = {t: c for t, c in (partitions or {}).items() if c > 0}
        self.groups: dict[str, Group] = {}
        self._new_member_id = new_member_id
        self._completed: list[tuple[str, str, JoinAnswer]] = []

    # -- operations ------------------------------------------------------
    def join(self, now: float, group: str, member_id: str, client_id: str,
             session_timeout_ms: int, rebalance_timeout_ms: int,
             subscription: Mapping[str, int]) -> JoinAnswer | Pending:
        """A JOIN_GROUP (``member_id`` "" for a new member)."""
        self.expire(now)
        lim = self.limits
        if not lim.min_session_timeout_ms <= session_timeout_ms <= lim.max_session_timeout_ms:
            return JoinAnswer(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if len(subscription) > lim.max_topics_per_member:
            return JoinAnswer(ErrorCode.INVALID_REQUEST, member_id=member_id)
        g = self.groups.get(group)
        if member_id:
            if g is None or member_id not in g.members:
                return JoinAnswer(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        elif g is None and len(self.groups) >= lim.max_groups:
            return JoinAnswer(ErrorCode.TOO_MANY_GROUPS)
        elif g is not None and len(g.members) >= lim.max_members:
            return JoinAnswer(ErrorCode.GROUP_TOO_LARGE)
        if g is None:
            g = self.groups[group] = Group(group)
        rebalance_ms = min(rebalance_timeout_ms, lim.max_rebalance_timeout_ms)
        sub = dict(subscription)
        if member_id:
            m = g.members[member_id]
            changed = m.subscription != sub
            m.client_id, m.subscription = client_id, sub
            m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_ms
            m.last_heartbeat = now
            if g.phase is GroupPhase.STABLE and not changed:
                return self._join_answer(g, member_id)
        else:
            member_id = self._unique_id(g, client_id)
            g.members[member_id] = Member(member_id, client_id, session_timeout_ms,
                                          rebalance_ms, sub, now)
        self._begin_rebalance(now, g)
        g.members[member_id].joined = True
        self._try_complete(now, g)
        for i, (name, mid, answer) in enumerate(self._completed):
            if name == group and mid == member_id:
                del self._completed[i]
                return answer
        return Pending(member_id)

    def sync(self, now: float, group: str, generation: int, member_id: str) -> SyncAnswer:
        """A SYNC_GROUP: the member's streams and their partitions in ``generation``."""
        code = self._check_member(now, group, generation, member_id)
        if code is not ErrorCode.NONE:
            return SyncAnswer(code)
        own = self.groups[group].assignment.get(member_id, {})
        return SyncAnswer(ErrorCode.NONE, {t: tuple(map(tuple, s)) for t, s in sorted(own.items())})

    def heartbeat(self, now: float, group: str, generation: int, member_id: str) -> ErrorCode:
        """A HEARTBEAT: NONE, or what the member must do (rejoin, rejoin as new)."""
        return self._check_member(now, group, generation, member_id)

    def leave(self, now: float, group: str, member_id: str) -> ErrorCode:
        """A LEAVE_GROUP: the member is gone at once; the others rebalance."""
        self.expire(now)
        g = self.groups.get(group)
        if g is None or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(now, g, [member_id])
        return ErrorCode.NONE

    def commit_allowed(self, now: float, group: str, generation: int, member_id: str) -> ErrorCode:
        """Whether an OFFSET_COMMIT from ``(generation, member_id)`` may be stored.

        ``(-1, "")`` is a commit from outside the coordinator (OFFSET_COMMIT
        v0): allowed only while the group has no members. A member commits in
        its generation, also while a rebalance waits for it (before it
        rejoins), never once a later generation formed."""
        self.expire(now)
        g = self.groups.get(group)
        unfenced = generation == NO_GENERATION and member_id == ""
        if g is None or not g.members:
            return ErrorCode.NONE if unfenced else ErrorCode.UNKNOWN_MEMBER_ID
        if unfenced or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def partitions_changed(self, now: float, topic: str, count: int) -> list[str]:
        """``topic`` now has ``count`` partitions (0: gone). The groups whose
        generation used another count start a rebalance; returns their names."""
        self.expire(now)
        if count > 0:
            self.partitions[topic] = count
        else:
            self.partitions.pop(topic, None)
        started = []
        for g in self.groups.values():
            if (g.phase is GroupPhase.STABLE and g.counts.get(topic, 0) != count
                    and any(topic in m.subscription for m in g.members.values())):
                self._begin_rebalance(now, g)
                started.append(g.name)
        return started

    def expire(self, now: float) -> None:
        """Drop members whose session ended (not those waiting in a join) and
        end rebalances whose wait is over or that every member joined."""
        for g in list(self.groups.values()):
            waiting = g.phase is GroupPhase.PREPARING_REBALANCE
            gone = [m.member_id for m in g.members.values()
                    if not (waiting and m.joined)
                    and now - m.last_heartbeat > m.session_timeout_ms]
            if gone:
                self._remove(now, g, gone)
                if self.groups.get(g.name) is not g:
                    continue  # its last member went: the group is forgotten
            if g.phase is GroupPhase.PREPARING_REBALANCE:
                if now >= g.rebalance_deadline:
                    self._complete(now, g)
                else:
                    self._try_complete(now, g)

    def completed(self) -> list[tuple[str, str, JoinAnswer]]:
        """``(group, member_id, answer)`` of every waiting join answered since
        the last call; the broker answers every join it holds for that member."""
        out, self._completed = self._completed, []
        return out

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`expire` would change something."""
        times = []
        for g in self.groups.values():
            waiting = g.phase is GroupPhase.PREPARING_REBALANCE
            if waiting:
                times.append(g.rebalance_deadline)
            times.extend(m.last_heartbeat + m.session_timeout_ms for m in g.members.values()
                         if not (waiting and m.joined))
        return min(times, default=None)

    def describe(self, group: str) -> dict | None:
        """Phase, generation, members and assignment of ``group`` (None: no such group)."""
        g = self.groups.get(group)
        if g is None:
            return None
        return {"group": g.name, "phase": g.phase.value, "generation": g.generation,
                "members": {mid: {"client_id": m.client_id, "subscription": dict(m.subscription),
                                  "session_timeout_ms": m.session_timeout_ms,
                                  "assignment": {t: [list(s) for s in streams] for t, streams
                                                 in sorted(g.assignment.get(mid, {}).items())}}
                            for mid, m in sorted(g.members.items())}}

    # -- the life cycle ---------------------------------------------------
    def _unique_id(self, g: Group, client_id: str) -> str:
        member_id = self._new_member_id(client_id)
        while member_id in g.members:
            member_id = self._new_member_id(client_id)
        return member_id

    def _join_answer(self, g: Group, member_id: str) -> JoinAnswer:
        return JoinAnswer(ErrorCode.NONE, g.generation, member_id, g.generation_members)

    def _check_member(self, now: float, group: str, generation: int, member_id: str) -> ErrorCode:
        self.expire(now)
        g = self.groups.get(group)
        if g is None or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        g.members[member_id].last_heartbeat = now
        if generation != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if g.phase is GroupPhase.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _begin_rebalance(self, now: float, g: Group) -> None:
        if g.phase is GroupPhase.PREPARING_REBALANCE:
            return
        g.phase = GroupPhase.PREPARING_REBALANCE
        for m in g.members.values():
            m.joined = False
        wait = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_deadline = now + min(wait, self.limits.max_rebalance_timeout_ms)

    def _remove(self, now: float, g: Group, member_ids: Iterable[str]) -> None:
        for member_id in member_ids:
            m = g.members.pop(member_id)
            g.assignment.pop(member_id, None)
            if m.joined:  # its join was waiting: it is answered, the member is gone
                self._completed.append((g.name, member_id,
                                        JoinAnswer(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)))
        if not g.members:
            del self.groups[g.name]
            return
        self._begin_rebalance(now, g)
        self._try_complete(now, g)

    def _try_complete(self, now: float, g: Group) -> None:
        if g.phase is GroupPhase.PREPARING_REBALANCE and all(
                m.joined for m in g.members.values()):
            self._complete(now, g)

    def _complete(self, now: float, g: Group) -> None:
        """A new generation of the members that joined; the others are dropped."""
        for member_id in [mid for mid, m in g.members.items() if not m.joined]:
            del g.members[member_id]
        if not g.members:
            del self.groups[g.name]
            return
        g.generation += 1
        g.phase = GroupPhase.STABLE
        g.rebalance_deadline = None
        g.generation_members = tuple(sorted(g.members))
        self._assign(g)
        for member_id, m in g.members.items():
            m.joined = False
            m.last_heartbeat = now
            self._completed.append((g.name, member_id, self._join_answer(g, member_id)))

    def _assign(self, g: Group) -> None:
        topics = sorted({t for m in g.members.values() for t in m.subscription})
        g.counts = {t: self.partitions.get(t, 0) for t in topics}
        pairs = {t: [(self.broker_id, p) for p in range(c)] for t, c in g.counts.items()}
        subs = {mid: m.subscription for mid, m in g.members.items()}
        g.assignment = {mid: {t: [[] for _ in range(n)] for t, n in m.subscription.items()}
                        for mid, m in g.members.items()}
        for topic, streams in assign_group(pairs, subs).items():
            for (member_id, index), owned in streams.items():
                g.assignment[member_id][topic][index] = [p for _, p in owned]

    # -- snapshot -------------------------------------------------------------
    def to_records(self) -> list[dict]:
        """The whole state as JSON-able records (answers not yet handed out by
        :meth:`completed` are not part of it)."""
        records: list[dict] = [{"type": "partitions", "counts": dict(sorted(self.partitions.items()))}]
        for g in self.groups.values():
            records.append({
                "type": "group", "group": g.name, "phase": g.phase.value,
                "generation": g.generation, "rebalance_deadline": g.rebalance_deadline,
                "generation_members": list(g.generation_members),
                "counts": dict(g.counts), "assignment": g.assignment,
                "members": [{"member_id": m.member_id, "client_id": m.client_id,
                             "session_timeout_ms": m.session_timeout_ms,
                             "rebalance_timeout_ms": m.rebalance_timeout_ms,
                             "subscription": dict(m.subscription),
                             "last_heartbeat": m.last_heartbeat, "joined": m.joined}
                            for m in g.members.values()],
            })
        return records

    @classmethod
    def from_records(cls, records: Iterable[Mapping], **kwargs) -> Coordinator:
        """A coordinator holding what :meth:`to_records` gave (``kwargs`` as the constructor's)."""
        coordinator = cls(**kwargs)
        for r in records:
            if r["type"] == "partitions":
                coordinator.partitions = {t: int(c) for t, c in r["counts"].items()}
                continue
            g = Group(r["group"], GroupPhase(r["phase"]), int(r["generation"]),
                      rebalance_deadline=r["rebalance_deadline"],
                      generation_members=tuple(r["generation_members"]),
                      counts={t: int(c) for t, c in r["counts"].items()},
                      assignment={mid: {t: [list(s) for s in streams]
                                        for t, streams in topics.items()}
                                  for mid, topics in r["assignment"].items()})
            for m in r["members"]:
                g.members[m["member_id"]] = Member(
                    m["member_id"], m["client_id"], int(m["session_timeout_ms"]),
                    int(m["rebalance_timeout_ms"]),
                    {t: int(n) for t, n in m["subscription"].items()},
                    m["last_heartbeat"], bool(m["joined"]))
            coordinator.groups[g.name] = g
        return coordinator
