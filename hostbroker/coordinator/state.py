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
work to do.

What one request costs is bounded by the request and its group, never by
the number of groups or members: the times at which something ends
(sessions, rebalance waits, deferred rebalances) are kept in a heap with
at most one live entry per member and group, so a HEARTBEAT only stamps its
member, and :meth:`Coordinator.expire` touches only what is due; the
entries of members and groups gone are swept each time the heap doubles. A group's
streams are bounded (``group.max.streams``), and so are its rebalances:
past a burst of ``group.rebalance.burst`` a group starts at most one each
``group.rebalance.min.interval.ms`` (its generation stays STABLE, and the
joins and leaves meanwhile wait for that one rebalance), so join and leave
churn cannot keep it from settling.

:meth:`Coordinator.changed` names the groups whose kept state changed since
it was last asked, :meth:`Coordinator.group_record` gives one group as a
record and :meth:`Coordinator.install_group` takes one back, as
:func:`hostbroker.coordinator.records.group_of_record` built and checked it: what
:mod:`hostbroker.coordinator.store` keeps for a process that replaces the
one holding the state.

Nothing here does I/O, sleeps or reads a clock.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from hostbroker.cluster.rebalance import assign_group
from hostbroker.coordinator.model import Group, GroupPhase, Limits, Member
from hostbroker.coordinator.records import MAX_INT32, clip_utf8, group_record
from hostbroker.errors import ErrorCode
from hostbroker.protocol.groups import MAX_MEMBER_ID_BYTES

__all__ = ["Coordinator", "Group", "GroupPhase", "JoinAnswer", "Limits", "Member", "Pending",
           "SyncAnswer"]

NO_GENERATION = -1
_TIMERS_SLACK = 1024  # heap entries beyond twice the last sweep's before stale ones are swept


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


def _default_member_id(client_id: str) -> str:
    prefix = (client_id or "consumer").encode("utf-8", "replace")[:MAX_MEMBER_ID_BYTES - 33]
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
        # (when, seq, group, member_id): a member's session check, or ("") the
        # group's rebalance deadline or deferred start; stale entries are skipped
        self._timers: list[tuple[float, int, str, str]] = []
        self._timers_kept = 0  # entries left by the last sweep of stale ones (_push)
        self._seq = itertools.count()
        self._changed: set[str] = set()  # groups changed since the last changed()
        # topic -> {group: its members subscribed to it}: a partition count that
        # moves concerns these groups alone
        self._subscribers: dict[str, dict[str, int]] = {}

    # -- operations ------------------------------------------------------
    def join(self, now: float, group: str, member_id: str, client_id: str,
             session_timeout_ms: int, rebalance_timeout_ms: int,
             subscription: Mapping[str, int]) -> JoinAnswer | Pending:
        """A JOIN_GROUP (``member_id`` "" for a new member)."""
        self.expire(now)
        lim = self.limits
        if not lim.min_session_timeout_ms <= session_timeout_ms <= lim.max_session_timeout_ms:
            return JoinAnswer(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        streams = sum(subscription.values())
        if len(subscription) > lim.max_topics_per_member or streams > lim.max_streams:
            return JoinAnswer(ErrorCode.INVALID_REQUEST, member_id=member_id)
        g = self.groups.get(group)
        if member_id:
            if g is None or member_id not in g.members:
                return JoinAnswer(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            before = sum(g.members[member_id].subscription.values())
            if g.streams - before + streams > lim.max_streams:
                return JoinAnswer(ErrorCode.GROUP_TOO_LARGE, member_id=member_id)
        elif g is None and len(self.groups) >= lim.max_groups:
            return JoinAnswer(ErrorCode.TOO_MANY_GROUPS)
        elif g is not None and (len(g.members) >= lim.max_members
                                or g.streams + streams > lim.max_streams):
            return JoinAnswer(ErrorCode.GROUP_TOO_LARGE)
        if g is None:
            g = self.groups[group] = Group(group)
        rebalance_ms = min(rebalance_timeout_ms, lim.max_rebalance_timeout_ms)
        sub = dict(subscription)
        client_id = clip_utf8(client_id)
        if member_id:
            m = g.members[member_id]
            changed = m.subscription != sub
            if changed or m.client_id != client_id or (
                    m.session_timeout_ms, m.rebalance_timeout_ms) != (session_timeout_ms,
                                                                      rebalance_ms):
                self._changed.add(g.name)
            g.streams += streams - sum(m.subscription.values())
            if changed:
                self._index(g, m.subscription, -1)
                self._index(g, sub, 1)
            m.client_id, m.subscription = client_id, sub
            m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_ms
            m.last_heartbeat = now
            if not m.joined:
                self._arm(g, m)  # a shorter session than before ends sooner
            if g.phase is GroupPhase.STABLE and not changed and not m.joined:
                return self._join_answer(g, member_id)
        else:
            member_id = self._unique_id(g, client_id)
            m = g.members[member_id] = Member(member_id, client_id, session_timeout_ms,
                                              rebalance_ms, sub, now)
            self._index(g, sub, 1)
            g.streams += streams
        m.joined = True
        self._changed.add(g.name)
        self._begin_rebalance(now, g)
        self._try_complete(now, g)
        # the latest answer is this join's: an earlier one (a rebalance that
        # ``expire`` completed above) is for a join of the member still waiting
        for i in range(len(self._completed) - 1, -1, -1):
            name, mid, answer = self._completed[i]
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
        for name in list(self._subscribers.get(topic, ())):
            g = self.groups[name]
            if g.phase is GroupPhase.STABLE and g.counts.get(topic, 0) != count:
                self._begin_rebalance(now, g)
                started.append(g.name)
        return started

    def expire(self, now: float) -> None:
        """Drop members whose session ended (not those waiting in a join), end
        rebalances whose wait is over and start the deferred ones that are due.

        The cost is that of what is due, not of the whole state: each member
        and group has at most one live entry in a heap of times, and a
        heartbeat only moves a member's ``last_heartbeat``; an entry that
        comes due for a member that beat meanwhile is put back at its new
        end."""
        timers = self._timers
        later = []
        while timers and timers[0][0] <= now:
            when, _, name, member_id = heapq.heappop(timers)
            g = self.groups.get(name)
            if g is None:
                continue
            if member_id:
                m = g.members.get(member_id)
                if m is None or m.timer != when:
                    continue  # gone, or a later entry is its live one
                m.timer = None
                if m.joined:
                    continue  # its session restarts when its join is answered
                if now - m.last_heartbeat > m.session_timeout_ms:
                    self._remove(now, g, [member_id])
                else:
                    later.append((g, m))
            elif g.phase is GroupPhase.PREPARING_REBALANCE and g.rebalance_deadline == when:
                self._complete(now, g)
            elif g.phase is GroupPhase.STABLE and g.deferred_at == when:
                g.deferred_at = None
                self._begin_rebalance(now, g, due=True)
                self._try_complete(now, g)
        for g, m in later:  # put back after the loop: one due at ``now`` is not over yet
            if self.groups.get(g.name) is g and g.members.get(m.member_id) is m:
                self._arm(g, m)

    def completed(self) -> list[tuple[str, str, JoinAnswer]]:
        """``(group, member_id, answer)`` of every waiting join answered since
        the last call; the broker answers every join it holds for that member."""
        out, self._completed = self._completed, []
        return out

    def changed(self) -> set[str]:
        """The names of the groups whose kept state (anything but heartbeat
        times) changed since the last call; a name no longer in
        :attr:`groups` was forgotten."""
        out, self._changed = self._changed, set()
        return out

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`expire` would change something.

        Entries of the heap's top that are stale (a member gone or waiting
        in a join, a rebalance over) are dropped, and one of a member that
        beat since it was pushed is moved to the member's end: each costs a
        heap operation, once per entry."""
        timers = self._timers
        while timers:
            when, _, name, member_id = timers[0]
            g = self.groups.get(name)
            if g is not None and member_id:
                m = g.members.get(member_id)
                if m is not None and m.timer == when and not m.joined:
                    end = m.last_heartbeat + m.session_timeout_ms
                    if end <= when:
                        return when
                    heapq.heappop(timers)
                    m.timer = None
                    self._arm(g, m)
                    continue
            elif g is not None and (
                    (g.phase is GroupPhase.PREPARING_REBALANCE and g.rebalance_deadline == when)
                    or (g.phase is GroupPhase.STABLE and g.deferred_at == when)):
                return when
            heapq.heappop(timers)
            if g is not None and member_id and g.members.get(member_id) is not None \
                    and g.members[member_id].timer == when:
                g.members[member_id].timer = None
        return None

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

    def _push(self, when: float, g: Group, member_id: str = "") -> None:
        timers = self._timers
        heapq.heappush(timers, (when, next(self._seq), g.name, member_id))
        if len(timers) > 2 * self._timers_kept + _TIMERS_SLACK:
            # entries of members and groups gone stay until they come due (up to
            # a session timeout): a client that joins and leaves new groups as
            # fast as it is answered would grow the heap without end. Sweep them
            # once it doubled since the last sweep (amortized: one check per push).
            timers[:] = [t for t in timers if self._may_fire(t)]  # in place: callers hold it
            heapq.heapify(timers)
            self._timers_kept = len(timers)

    def _may_fire(self, entry: tuple[float, int, str, str]) -> bool:
        """Whether a heap entry is still the live one of its member or group."""
        when, _, name, member_id = entry
        g = self.groups.get(name)
        if g is None:
            return False
        if member_id:
            m = g.members.get(member_id)
            return m is not None and m.timer == when
        return ((g.phase is GroupPhase.PREPARING_REBALANCE and g.rebalance_deadline == when)
                or (g.phase is GroupPhase.STABLE and g.deferred_at == when))

    def _arm(self, g: Group, m: Member) -> None:
        """Make sure ``m``'s session is checked at its end (at most one live entry)."""
        when = m.last_heartbeat + m.session_timeout_ms
        if m.timer is None or m.timer > when:
            m.timer = when
            self._push(when, g, m.member_id)

    def _begin_rebalance(self, now: float, g: Group, due: bool = False) -> None:
        """Start a rebalance now, or, past the group's burst of them, when the
        churn limit lets it (the group stays STABLE meanwhile; what changed
        waits for that rebalance); ``due``: a deferred one whose time came."""
        if g.phase is GroupPhase.PREPARING_REBALANCE or g.deferred_at is not None:
            return
        self._changed.add(g.name)
        lim = self.limits
        interval = lim.rebalance_min_interval_ms
        tokens = float(lim.rebalance_burst) if g.tokens is None else g.tokens
        if interval > 0:
            tokens = min(float(lim.rebalance_burst), tokens + (now - g.tokens_at) / interval)
        if due:
            tokens = max(tokens, 1.0)  # what rounding left of the token it waited for
        g.tokens_at = now
        if interval > 0 and tokens < 1:
            g.tokens = tokens
            g.deferred_at = now + (1 - tokens) * interval
            self._push(g.deferred_at, g)
            return
        g.tokens = tokens - 1
        g.phase = GroupPhase.PREPARING_REBALANCE
        wait = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_deadline = now + min(wait, lim.max_rebalance_timeout_ms)
        self._push(g.rebalance_deadline, g)

    def _drop(self, g: Group, member_id: str) -> Member:
        m = g.members.pop(member_id)
        g.streams -= sum(m.subscription.values())
        self._index(g, m.subscription, -1)
        return m

    def _index(self, g: Group, subscription: Mapping[str, int], delta: int) -> None:
        for topic in subscription:
            groups = self._subscribers.setdefault(topic, {})
            n = groups.get(g.name, 0) + delta
            if n > 0:
                groups[g.name] = n
            else:
                groups.pop(g.name, None)
                if not groups:
                    del self._subscribers[topic]

    def _remove(self, now: float, g: Group, member_ids: Iterable[str]) -> None:
        self._changed.add(g.name)
        for member_id in member_ids:
            m = self._drop(g, member_id)
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
        self._changed.add(g.name)
        for member_id in [mid for mid, m in g.members.items() if not m.joined]:
            self._drop(g, member_id)
        if not g.members:
            del self.groups[g.name]
            return
        g.generation = g.generation % MAX_INT32 + 1  # an int32 on the wire: 1 after the last
        g.phase = GroupPhase.STABLE
        g.rebalance_deadline = None
        g.generation_members = tuple(sorted(g.members))
        self._assign(g)
        for member_id, m in g.members.items():
            m.joined = False
            m.last_heartbeat = now
            self._arm(g, m)
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

    # -- records ----------------------------------------------------------------
    def group_record(self, name: str) -> dict | None:
        """The record of group ``name`` (None: no such group, it was forgotten)."""
        g = self.groups.get(name)
        return None if g is None else group_record(g)

    def install_group(self, g: Group) -> None:
        """Hold group ``g`` (built and checked by
        :func:`~hostbroker.coordinator.records.group_of_record`), replacing one
        of its name; the topics its generation counted become known with
        that count until the caller says otherwise."""
        old = self.groups.get(g.name)
        if old is not None:
            for m in old.members.values():
                self._index(old, m.subscription, -1)
        self.groups[g.name] = g
        for m in g.members.values():
            self._index(g, m.subscription, 1)
        for t, c in g.counts.items():
            if c > 0:
                self.partitions.setdefault(t, c)
        for m in g.members.values():
            m.timer = None
            if not m.joined:
                self._arm(g, m)
        if g.phase is GroupPhase.PREPARING_REBALANCE:
            self._push(g.rebalance_deadline, g)
        elif g.deferred_at is not None:
            self._push(g.deferred_at, g)
