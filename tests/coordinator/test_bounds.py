"""What one request may cost the coordinator (hostbroker/coordinator/state.py) and
how long one member may hold its group: heartbeats that do not scan the groups, the
streams of one group bounded, a rebalance wait of seconds by default, and join and
leave churn rate-limited so that it cannot keep a group from settling."""

from __future__ import annotations

import itertools

from hostbroker.config import SETTINGS_BY_KEY
from hostbroker.coordinator import Coordinator, GroupPhase, JoinAnswer, Limits, Pending
from hostbroker.errors import ErrorCode as E

SESSION = 1000


def make(limits: Limits = Limits(), partitions=None) -> Coordinator:
    ids = itertools.count(1)
    return Coordinator(limits, partitions=partitions or {"t": 6},
                       new_member_id=lambda client: f"{client}-{next(ids)}")


def test_limits_default_to_the_declared_settings():
    declared = {
        "max_members": "group.max.members", "max_groups": "group.max.groups",
        "min_session_timeout_ms": "group.min.session.timeout.ms",
        "max_session_timeout_ms": "group.max.session.timeout.ms",
        "max_rebalance_timeout_ms": "group.max.rebalance.timeout.ms",
        "max_topics_per_member": "group.max.topics.per.member",
        "max_streams": "group.max.streams", "rebalance_burst": "group.rebalance.burst",
        "rebalance_min_interval_ms": "group.rebalance.min.interval.ms",
        "max_partitions": "max.partitions",
    }
    for field, key in declared.items():
        assert getattr(Limits(), field) == SETTINGS_BY_KEY[key].default, key


# -- one request's work ------------------------------------------------------------

class CountingGroups(dict):
    """The coordinator's groups, counting every walk over all of them."""

    walks = 0

    def values(self):
        CountingGroups.walks += 1
        return super().values()

    def items(self):
        CountingGroups.walks += 1
        return super().items()

    def __iter__(self):
        CountingGroups.walks += 1
        return super().__iter__()


def test_heartbeats_of_ten_thousand_members_never_walk_the_groups():
    c = make()
    for i in range(10000):
        assert c.join(0, f"g{i}", "", "c", SESSION, 100, {"t": 1}).generation == 1
    c.groups = CountingGroups(c.groups)
    CountingGroups.walks = 0
    now = 0
    for round_ in range(3):  # each member beats every 300 ms, the deadline is polled
        for i in range(10000):
            now += 0.03
            assert c.heartbeat(now, f"g{i}", 1, f"c-{i + 1}") == E.NONE
            if i % 100 == 0:
                deadline = c.next_deadline()
                assert deadline > now
                c.expire(now)
    assert CountingGroups.walks == 0
    assert len(c.groups) == 10000
    # every session check that came due was put back once, no more
    assert len(c._timers) <= 2 * 10000


def test_a_session_ends_on_time_though_nothing_scans_for_it():
    c = make()
    c.join(0, "g", "", "a", SESSION, 100, {"t": 1})
    c.join(0, "h", "", "b", SESSION, 100, {"t": 1})
    for t in range(100, 3000, 100):
        c.heartbeat(t, "h", 1, "b-2")
        c.expire(t)
        assert ("g" in c.groups) == (t <= SESSION)
    assert c.next_deadline() == 2900 + SESSION


def test_the_streams_of_one_group_are_bounded():
    c = make(Limits(max_streams=10))
    big = {f"topic-{i}": 1024 for i in range(1000)}  # what the request bounds let through
    assert c.join(0, "g", "", "a", SESSION, 100, big) == JoinAnswer(E.INVALID_REQUEST)
    assert c.groups == {}
    assert c.join(0, "g", "", "a", SESSION, 100, {"t": 6}).generation == 1
    assert c.join(1, "g", "", "b", SESSION, 100, {"t": 5}) == JoinAnswer(E.GROUP_TOO_LARGE)
    assert isinstance(c.join(2, "g", "", "b", SESSION, 100, {"t": 4}), Pending)
    # a rejoin that would grow the group past it is refused as well
    assert c.join(3, "g", "a-1", "a", SESSION, 100, {"t": 7}) == JoinAnswer(
        E.GROUP_TOO_LARGE, member_id="a-1")
    assert c.join(4, "g", "a-1", "a", SESSION, 100, {"t": 6}).generation == 2
    assert c.groups["g"].streams == 10
    assert c.leave(5, "g", "b-2") == E.NONE
    assert c.groups["g"].streams == 6


def test_a_client_id_is_kept_to_255_bytes():
    c = make()
    c.join(0, "g", "", "é" * 20000, SESSION, 100, {"t": 1})
    (member,) = c.groups["g"].members.values()
    assert len(member.client_id.encode()) <= 255


# -- how long one member holds its group --------------------------------------------

def test_a_member_stalled_mid_rebalance_holds_its_group_seconds_not_minutes():
    assert Limits().max_rebalance_timeout_ms <= 10000
    c = make()
    ten_minutes = 600000
    c.join(0, "g", "", "stalls", SESSION, ten_minutes, {"t": 1})
    assert isinstance(c.join(10, "g", "", "b", SESSION, ten_minutes, {"t": 1}), Pending)
    # "stalls" heartbeats (its session holds) but never rejoins
    t = 10
    while c.groups["g"].phase is GroupPhase.PREPARING_REBALANCE:
        t += 100
        c.heartbeat(t, "g", 1, "stalls-1")
        c.expire(t)
    assert t <= 10 + Limits().max_rebalance_timeout_ms + 100
    assert [a.members for _, _, a in c.completed()] == [("b-2",)]


def test_join_and_leave_churn_cannot_keep_a_group_from_settling():
    """A client joins as a new member and leaves again every 20 ms for a minute,
    beside two members that beat every 100 ms and rejoin when told. Unlimited,
    every churn restarts the rebalance and the two are hardly ever STABLE; with the
    limit the group starts at most its burst plus one rebalance per interval, and
    the two hold a generation most of the time."""
    limits = Limits()
    c = make(limits)
    good = {}
    for name in ("a", "b"):
        answer = c.join(0, "g", "", name, 3000, 1000, {"t": 1})
        if isinstance(answer, JoinAnswer):
            good[answer.member_id] = answer.generation
        else:
            good[answer.member_id] = None
    for _, mid, answer in c.completed():
        good[mid] = answer.generation
    rebalances = 0
    phase = c.groups["g"].phase
    stable_ms = 0
    hostile = None
    duration = 60000
    for now in range(10, duration, 10):
        if now % 20 == 0:
            if hostile is None:
                answer = c.join(now, "g", "", "churn", 3000, 1000, {"t": 1})
                hostile = answer.member_id
            else:
                c.leave(now, "g", hostile)
                hostile = None
        if now % 100 == 0:
            for mid, generation in list(good.items()):
                if generation is None:
                    continue
                code = c.heartbeat(now, "g", generation, mid)
                if code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION):
                    answer = c.join(now, "g", mid, mid[0], 3000, 1000, {"t": 1})
                    good[mid] = answer.generation if isinstance(answer, JoinAnswer) else None
                assert code != E.UNKNOWN_MEMBER_ID
        c.expire(now)
        for _, mid, answer in c.completed():
            if mid in good:
                good[mid] = answer.generation
        g = c.groups["g"]
        if g.phase is not phase and g.phase is GroupPhase.PREPARING_REBALANCE:
            rebalances += 1
        phase = g.phase
        if g.phase is GroupPhase.STABLE and all(
                good[m] == g.generation for m in good):
            stable_ms += 10
    assert rebalances <= limits.rebalance_burst + duration // limits.rebalance_min_interval_ms
    assert stable_ms >= 0.8 * duration


def test_a_deferred_rebalance_starts_when_the_limit_allows_and_takes_what_came_meanwhile():
    c = make(Limits(rebalance_burst=1, rebalance_min_interval_ms=1000))
    c.join(0, "g", "", "a", SESSION, 100, {"t": 1})  # the burst's one rebalance
    assert c.groups["g"].phase is GroupPhase.STABLE
    assert isinstance(c.join(10, "g", "", "b", SESSION, 100, {"t": 1}), Pending)
    assert isinstance(c.join(20, "g", "", "c", SESSION, 100, {"t": 1}), Pending)
    g = c.groups["g"]
    assert g.phase is GroupPhase.STABLE and g.deferred_at == 1000
    # a keeps its generation meanwhile and learns of the rebalance when it starts
    assert c.heartbeat(500, "g", 1, "a-1") == E.NONE
    assert c.next_deadline() == 1000
    c.expire(1000)
    assert c.heartbeat(1000, "g", 1, "a-1") == E.REBALANCE_IN_PROGRESS
    answer = c.join(1050, "g", "a-1", "a", SESSION, 100, {"t": 1})
    assert answer.generation == 2 and answer.members == ("a-1", "b-2", "c-3")
    # a waiting joiner that leaves before the rebalance is answered and gone
    assert isinstance(c.join(1100, "g", "", "d", SESSION, 100, {"t": 1}), Pending)
    assert c.leave(1110, "g", "d-4") == E.NONE
    assert [(m, a.error) for _, m, a in c.completed() if m == "d-4"] == [
        ("d-4", E.UNKNOWN_MEMBER_ID)]


def test_a_partition_count_that_moves_concerns_only_the_groups_subscribed():
    c = make(partitions={"t": 6, "u": 2})
    for i in range(9999):
        c.join(0, f"g{i}", "", "c", SESSION, 100, {"t": 1})
    assert c.join(0, "h", "", "c", SESSION, 100, {"u": 1}).generation == 1
    c.groups = CountingGroups(c.groups)
    CountingGroups.walks = 0
    for count in range(3, 1003):  # e.g. a replacement learning every topic of the table
        assert c.partitions_changed(1, f"other-{count}", count) == []
    assert c.partitions_changed(1, "u", 4) == ["h"]
    assert CountingGroups.walks == 0
    assert c.groups["h"].phase is GroupPhase.PREPARING_REBALANCE


def test_a_second_join_that_completes_a_rebalance_gets_the_latest_generation():
    """A member's first join waits; its rebalance ends (a member that never
    rejoined is dropped) just as the same member joins again with another
    subscription, which completes one more rebalance at once: that join is
    answered the newer generation, the waiting one the older."""
    c = make()
    assert c.join(0, "g", "", "a", SESSION, 100, {"t": 1}).generation == 1
    assert isinstance(c.join(10, "g", "", "b", SESSION, 100, {"t": 1}), Pending)
    answer = c.join(200, "g", "b-2", "b", SESSION, 100, {"t": 2})
    assert answer.error == E.NONE and answer.generation == 3
    assert [(m, a.generation) for _, m, a in c.completed()] == [("b-2", 2)]


def test_groups_joined_and_left_as_fast_as_answered_leave_no_growing_heap():
    """Each one-member group formed arms its member's session check (up to the
    longest session); the group left at once leaves that entry stale. Stale
    entries are swept, so 20,000 such groups leave the heap small, and what is
    live still ends on time."""
    c = make()
    long = Limits().max_session_timeout_ms
    c.join(0, "kept", "", "k", SESSION, 100, {"t": 1})
    for i in range(20000):  # 40,000 entries, unswept
        answer = c.join(1, f"brief-{i}", "", "q", long, 100, {"t": 1})
        assert c.leave(1, f"brief-{i}", answer.member_id) == E.NONE
    assert len(c._timers) < 5000
    assert set(c.groups) == {"kept"}
    assert c.next_deadline() == SESSION
    c.expire(SESSION + 1)
    assert c.groups == {}
