"""The group state machine (hostbroker/coordinator/state.py) against docs/spec/groups.md:
life cycles on an injected clock, fencing, limits, snapshots, and a
state-machine property that a stable generation owns every partition once."""

import itertools
import json

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hostbroker.cluster.rebalance import assign_group
from hostbroker.coordinator import Coordinator, GroupPhase, JoinAnswer, Limits, Pending, SyncAnswer
from hostbroker.coordinator.records import group_of_record
from hostbroker.errors import ErrorCode

SESSION = 1000
REBALANCE = 3000
E = ErrorCode


def make(partitions=None, **limits):
    ids = itertools.count(1)
    return Coordinator(Limits(**limits), partitions=partitions or {"t": 6},
                       new_member_id=lambda client: f"{client}-{next(ids)}")


def join(c, now, member_id="", client="c", sub=None, group="g", session=SESSION,
         rebalance=REBALANCE):
    return c.join(now, group, member_id, client, session, rebalance, sub or {"t": 1})


def test_a_member_alone_forms_generation_one_and_owns_every_partition():
    c = make()
    answer = join(c, 0, client="a")
    assert answer == JoinAnswer(E.NONE, 1, "a-1", ("a-1",))
    assert c.completed() == []
    assert c.sync(10, "g", 1, "a-1") == SyncAnswer(E.NONE, {"t": ((0, 1, 2, 3, 4, 5),)})
    assert c.heartbeat(20, "g", 1, "a-1") == E.NONE
    assert c.describe("g")["phase"] == "STABLE"


def test_streams_split_the_range_as_zookeeper_mode_does():
    c = make({"t": 7})
    join(c, 0, client="a", sub={"t": 3})
    sync = c.sync(0, "g", 1, "a-1")
    assert sync.assignment == {"t": ((0, 1, 2), (3, 4), (5, 6))}
    expected = assign_group({"t": [(0, p) for p in range(7)]}, {"a-1": {"t": 3}})["t"]
    assert [[p for _, p in expected[("a-1", i)]] for i in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]


def test_a_second_member_starts_a_rebalance_the_first_learns_by_heartbeat():
    c = make()
    join(c, 0, client="a")
    assert join(c, 100, client="b") == Pending("b-2")
    assert c.heartbeat(150, "g", 1, "a-1") == E.REBALANCE_IN_PROGRESS
    assert c.sync(150, "g", 1, "a-1") == SyncAnswer(E.REBALANCE_IN_PROGRESS)
    # the old generation may still commit what it read before it rejoins
    assert c.commit_allowed(160, "g", 1, "a-1") == E.NONE
    assert c.completed() == []
    assert join(c, 200, "a-1", client="a") == JoinAnswer(E.NONE, 2, "a-1", ("a-1", "b-2"))
    assert c.completed() == [("g", "b-2", JoinAnswer(E.NONE, 2, "b-2", ("a-1", "b-2")))]
    assert c.sync(210, "g", 2, "a-1").assignment == {"t": ((0, 1, 2),)}
    assert c.sync(210, "g", 2, "b-2").assignment == {"t": ((3, 4, 5),)}
    # the first generation is fenced now
    assert c.commit_allowed(220, "g", 1, "a-1") == E.ILLEGAL_GENERATION
    assert c.heartbeat(220, "g", 1, "a-1") == E.ILLEGAL_GENERATION
    assert c.commit_allowed(220, "g", 2, "a-1") == E.NONE


def test_a_member_missing_the_rebalance_wait_is_dropped():
    c = make()
    join(c, 0, client="a")
    join(c, 100, client="b")  # pending; a is awaited up to REBALANCE ms
    join(c, 150, "b-2", client="b")  # a retried join of b, still waiting
    # a heartbeats meanwhile (so its session holds) but never rejoins
    for t in range(400, 3000, 400):
        assert c.heartbeat(t, "g", 1, "a-1") == E.REBALANCE_IN_PROGRESS
    assert c.next_deadline() == 100 + REBALANCE
    c.expire(100 + REBALANCE - 1)
    assert c.completed() == []
    c.expire(100 + REBALANCE)
    assert c.completed() == [("g", "b-2", JoinAnswer(E.NONE, 2, "b-2", ("b-2",)))]
    assert c.heartbeat(3200, "g", 1, "a-1") == E.UNKNOWN_MEMBER_ID
    assert c.commit_allowed(3200, "g", 1, "a-1") == E.UNKNOWN_MEMBER_ID
    assert c.sync(3200, "g", 2, "b-2").assignment == {"t": ((0, 1, 2, 3, 4, 5),)}
    # a rejoins as a new member
    assert join(c, 3300, "a-1", client="a") == JoinAnswer(E.UNKNOWN_MEMBER_ID, member_id="a-1")
    assert join(c, 3300, client="a") == Pending("a-3")


def test_the_rebalance_wait_is_the_longest_member_timeout_capped_by_the_broker():
    c = make(max_rebalance_timeout_ms=2000)
    join(c, 0, client="a", rebalance=500, session=5000)
    join(c, 0, client="b", rebalance=10000, session=5000)
    assert c.next_deadline() == 0 + 2000  # min(10000, cap); a's own wait is shorter
    c.expire(1999)
    assert c.completed() == []
    c.expire(2000)
    assert c.describe("g")["members"].keys() == {"b-2"}


def test_heartbeat_during_rebalance_answers_rebalance_in_progress_then_none():
    c = make()
    join(c, 0, client="a")
    join(c, 10, client="b")
    assert c.heartbeat(20, "g", 1, "a-1") == E.REBALANCE_IN_PROGRESS
    join(c, 30, "a-1", client="a")
    assert c.heartbeat(40, "g", 2, "a-1") == E.NONE
    assert c.heartbeat(40, "g", 2, "b-2") == E.NONE


def test_a_stale_generation_commit_is_refused_and_unfenced_commits_need_an_empty_group():
    c = make()
    assert c.commit_allowed(0, "g", -1, "") == E.NONE  # no coordinator members: v0 as ever
    assert c.commit_allowed(0, "g", 3, "x") == E.UNKNOWN_MEMBER_ID
    join(c, 0, client="a")
    assert c.commit_allowed(1, "g", -1, "") == E.UNKNOWN_MEMBER_ID
    assert c.commit_allowed(1, "g", 1, "zz") == E.UNKNOWN_MEMBER_ID
    assert c.commit_allowed(1, "g", 0, "a-1") == E.ILLEGAL_GENERATION
    assert c.commit_allowed(1, "g", 1, "a-1") == E.NONE
    assert c.leave(2, "g", "a-1") == E.NONE
    assert c.commit_allowed(3, "g", 1, "a-1") == E.UNKNOWN_MEMBER_ID
    assert c.commit_allowed(3, "g", -1, "") == E.NONE


def test_session_expiry_moves_the_partitions_to_the_others():
    c = make()
    join(c, 0, client="a")
    join(c, 0, client="b")
    join(c, 0, "a-1", client="a")
    c.completed()
    assert c.sync(0, "g", 2, "a-1").assignment == {"t": ((0, 1, 2),)}
    # b keeps beating, a goes silent
    for t in range(300, SESSION, 300):
        assert c.heartbeat(t, "g", 2, "b-2") == E.NONE
    assert c.next_deadline() == SESSION
    c.expire(SESSION)
    assert c.describe("g")["phase"] == "STABLE"  # not over yet: more than the session
    c.expire(SESSION + 1)
    assert c.heartbeat(SESSION + 2, "g", 2, "b-2") == E.REBALANCE_IN_PROGRESS
    assert join(c, SESSION + 3, "b-2", client="b") == JoinAnswer(E.NONE, 3, "b-2", ("b-2",))
    assert c.sync(SESSION + 4, "g", 3, "b-2").assignment == {"t": ((0, 1, 2, 3, 4, 5),)}
    assert c.commit_allowed(SESSION + 5, "g", 2, "a-1") == E.UNKNOWN_MEMBER_ID


def test_a_waiting_join_keeps_its_member_alive_past_its_session():
    c = make()
    join(c, 0, client="a")
    join(c, 0, client="b")  # waits for a, up to REBALANCE > SESSION
    c.expire(SESSION + 500)  # a's session is over; b waits in its join
    assert c.completed() == [("g", "b-2", JoinAnswer(E.NONE, 2, "b-2", ("b-2",)))]


def test_leave_rebalances_the_rest_and_answers_a_waiting_join():
    c = make()
    join(c, 0, client="a")
    join(c, 0, client="b")
    assert c.leave(5, "g", "b-2") == E.NONE
    # a's generation 1 carries on after a rebalance that a alone completes
    assert c.completed() == [("g", "b-2", JoinAnswer(E.UNKNOWN_MEMBER_ID, member_id="b-2"))]
    assert c.heartbeat(6, "g", 1, "a-1") == E.REBALANCE_IN_PROGRESS
    assert join(c, 7, "a-1", client="a") == JoinAnswer(E.NONE, 2, "a-1", ("a-1",))
    assert c.leave(8, "g", "b-2") == E.UNKNOWN_MEMBER_ID
    assert c.leave(8, "g", "a-1") == E.NONE
    assert c.describe("g") is None


def test_partitions_added_trigger_a_rebalance():
    c = make({"t": 2})
    join(c, 0, client="a", sub={"t": 1, "u": 1})
    assert c.sync(0, "g", 1, "a-1").assignment == {"t": ((0, 1),), "u": ((),)}
    assert c.partitions_changed(1, "t", 2) == []
    assert c.partitions_changed(1, "other", 5) == []
    assert c.partitions_changed(2, "u", 3) == ["g"]
    assert c.heartbeat(3, "g", 1, "a-1") == E.REBALANCE_IN_PROGRESS
    assert join(c, 4, "a-1", client="a", sub={"t": 1, "u": 1}).generation == 2
    assert c.sync(5, "g", 2, "a-1").assignment == {"t": ((0, 1),), "u": ((0, 1, 2),)}


def test_a_rejoin_with_the_same_subscription_keeps_the_generation():
    c = make()
    join(c, 0, client="a")
    assert join(c, 1, "a-1", client="a") == JoinAnswer(E.NONE, 1, "a-1", ("a-1",))
    assert join(c, 2, "a-1", client="a", sub={"t": 2}) == JoinAnswer(E.NONE, 2, "a-1", ("a-1",))
    assert c.sync(3, "g", 2, "a-1").assignment == {"t": ((0, 1, 2), (3, 4, 5))}


def test_limits_are_refused_with_their_codes():
    c = make(max_members=2, max_groups=1, min_session_timeout_ms=100,
             max_session_timeout_ms=5000, max_topics_per_member=2)
    assert join(c, 0, session=99) == JoinAnswer(E.INVALID_SESSION_TIMEOUT)
    assert join(c, 0, session=5001) == JoinAnswer(E.INVALID_SESSION_TIMEOUT)
    assert join(c, 0, sub={"a": 1, "b": 1, "c": 1}) == JoinAnswer(E.INVALID_REQUEST)
    assert join(c, 0, client="a", session=100).error == E.NONE
    assert join(c, 0, client="b", session=5000) == Pending("b-2")
    assert join(c, 0, client="x") == JoinAnswer(E.GROUP_TOO_LARGE)
    assert join(c, 0, client="x", group="h") == JoinAnswer(E.TOO_MANY_GROUPS)
    assert join(c, 0, "nobody", group="h") == JoinAnswer(E.UNKNOWN_MEMBER_ID, member_id="nobody")
    assert c.groups.keys() == {"g"}


def to_records(c: Coordinator) -> list[dict]:
    """The whole state as JSON-able records: the partition counts, then each group."""
    return [{"type": "partitions", "counts": dict(sorted(c.partitions.items()))},
            *(c.group_record(name) for name in c.groups)]


def from_records(records: list[dict], **kwargs) -> Coordinator:
    """A coordinator (``kwargs`` as the constructor's) holding what :func:`to_records`
    gave, times kept, each group checked as the state file's are."""
    fresh = Coordinator(**kwargs)
    for record in records[1:]:
        fresh.install_group(group_of_record(record, fresh.limits, 0.0, keep_times=True))
    fresh.partitions = dict(records[0]["counts"])
    return fresh


def test_snapshot_round_trip_through_json_carries_on_identically():
    c = make({"t": 5, "u": 2})
    join(c, 0, client="a", sub={"t": 2})
    join(c, 10, client="b", sub={"t": 1, "u": 1})
    join(c, 20, "a-1", client="a", sub={"t": 2})
    join(c, 30, client="d")  # a rebalance in progress, d waits
    c.completed()
    records = json.loads(json.dumps(to_records(c)))
    ids = itertools.count(10)
    twin = from_records(records, partitions={}, new_member_id=lambda cl: f"{cl}-{next(ids)}")
    assert to_records(twin) == to_records(c)
    for coordinator in (c, twin):
        assert coordinator.heartbeat(40, "g", 2, "b-2") == E.REBALANCE_IN_PROGRESS
        coordinator.join(50, "g", "a-1", "a", SESSION, REBALANCE, {"t": 2})
        assert coordinator.join(50, "g", "b-2", "b", SESSION, REBALANCE,
                                {"t": 1, "u": 1}).generation == 3
        assert [(m, a.generation) for _, m, a in coordinator.completed()] == [("a-1", 3), ("d-3", 3)]
        assert coordinator.sync(60, "g", 3, "d-3").assignment == {"t": ((4,),)}
    assert to_records(twin) == to_records(c)


# -- every stable generation owns every partition exactly once -------------

TOPICS = ("t", "u")


class GroupLifecycles(RuleBasedStateMachine):
    """Random joins, rejoins, leaves, silences, clock jumps and partition changes."""

    def __init__(self):
        super().__init__()
        ids = itertools.count()
        self.now = 0
        self.c = Coordinator(Limits(max_members=5, min_session_timeout_ms=100),
                             partitions={"t": 4},
                             new_member_id=lambda cl: f"{cl}-{next(ids)}")
        self.generation = {}  # member -> the generation its last answer named

    def _note(self, group, member, answer):
        if isinstance(answer, JoinAnswer) and answer.error == E.NONE:
            self.generation[(group, member)] = answer.generation

    def _drain(self):
        for group, member, answer in self.c.completed():
            self._note(group, member, answer)

    @rule(group=st.sampled_from("gh"), client=st.sampled_from("abc"),
          sub=st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 3), min_size=1),
          session=st.integers(100, 400), rebalance=st.integers(1, 600))
    def join_new(self, group, client, sub, session, rebalance):
        answer = self.c.join(self.now, group, "", client, session, rebalance, sub)
        if isinstance(answer, JoinAnswer):
            self._note(group, answer.member_id, answer)
        self._drain()

    @rule(data=st.data())
    def rejoin(self, data):
        members = sorted((g.name, mid) for g in self.c.groups.values() for mid in g.members)
        if not members:
            return
        group, member = data.draw(st.sampled_from(members))
        m = self.c.groups[group].members[member]
        sub = data.draw(st.sampled_from([m.subscription, {"t": 1}, {"t": 2, "u": 1}]))
        answer = self.c.join(self.now, group, member, m.client_id, m.session_timeout_ms,
                             m.rebalance_timeout_ms, sub)
        self._note(group, member, answer)
        self._drain()

    @rule(data=st.data(), leave=st.booleans())
    def beat_or_leave(self, data, leave):
        members = sorted(self.generation)
        if not members:
            return
        group, member = data.draw(st.sampled_from(members))
        if leave:
            self.c.leave(self.now, group, member)
        else:
            self.c.heartbeat(self.now, group, self.generation[(group, member)], member)
        self._drain()

    @rule()
    def everyone_answers(self):
        """What live clients do: beat, and rejoin when told a rebalance is on."""
        for g in list(self.c.groups.values()):
            for mid, m in list(g.members.items()):
                if mid not in g.members or m.joined:
                    continue
                code = self.c.heartbeat(self.now, g.name, self.generation.get((g.name, mid), 0), mid)
                if code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION):
                    self._note(g.name, mid, self.c.join(
                        self.now, g.name, mid, m.client_id, m.session_timeout_ms,
                        m.rebalance_timeout_ms, m.subscription))
                self._drain()

    @rule(ms=st.integers(1, 500))
    def time_passes(self, ms):
        self.now += ms
        self.c.expire(self.now)
        self._drain()

    @rule(topic=st.sampled_from(TOPICS), count=st.integers(0, 9))
    def partitions_change(self, topic, count):
        self.c.partitions_changed(self.now, topic, count)
        self._drain()

    @rule()
    def snapshot_reload(self):
        records = json.loads(json.dumps(to_records(self.c)))
        fresh = from_records(records, limits=self.c.limits,
                             new_member_id=self.c._new_member_id)
        assert to_records(fresh) == records
        fresh._completed = self.c.completed()
        self.c = fresh

    @invariant()
    def the_subscribers_of_each_topic_are_indexed(self):
        walked = {}
        for g in self.c.groups.values():
            for m in g.members.values():
                for topic in m.subscription:
                    walked.setdefault(topic, {}).setdefault(g.name, 0)
                    walked[topic][g.name] += 1
        assert self.c._subscribers == walked

    @invariant()
    def the_next_deadline_is_the_earliest_end(self):
        """What the heap says is what a walk over every group and member finds."""
        ends = []
        for g in self.c.groups.values():
            if g.phase is GroupPhase.PREPARING_REBALANCE:
                ends.append(g.rebalance_deadline)
            elif g.deferred_at is not None:
                ends.append(g.deferred_at)
            ends.extend(m.last_heartbeat + m.session_timeout_ms
                        for m in g.members.values() if not m.joined)
        assert self.c.next_deadline() == min(ends, default=None)

    @invariant()
    def stable_generations_own_each_partition_once(self):
        for g in self.c.groups.values():
            assert g.members, "a group without members is forgotten"
            if g.phase is not GroupPhase.STABLE:
                continue
            if g.deferred_at is not None:
                # a rebalance waits for the churn limit: the generation's members
                # that are left keep their streams, no partition twice
                owned = [(t, p) for a in g.assignment.values() for t, streams in a.items()
                         for s in streams for p in s]
                assert len(owned) == len(set(owned))
                assert set(g.assignment) <= set(g.generation_members)
                continue
            assert g.generation_members == tuple(sorted(g.members))
            subscribed = {t for m in g.members.values() for t in m.subscription}
            for topic in subscribed:
                owners = {}
                described = self.c.describe(g.name)["members"]  # sync would beat
                for mid, m in g.members.items():
                    streams = described[mid]["assignment"].get(topic, ())
                    assert len(streams) == m.subscription.get(topic, 0)
                    for index, partitions in enumerate(streams):
                        for p in partitions:
                            assert p not in owners, (topic, p, owners[p], (mid, index))
                            owners[p] = (mid, index)
                assert sorted(owners) == list(range(self.c.partitions.get(topic, 0)))


TestGroupLifecycles = GroupLifecycles.TestCase
TestGroupLifecycles.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)


def test_the_lifecycles_hold_with_stale_timers_swept_at_every_push(monkeypatch):
    """The same machine with the heap's sweep of stale entries at every push,
    where the default slack would never let it run in so few steps."""
    from hypothesis.stateful import run_state_machine_as_test

    from hostbroker.coordinator import state as state_module

    monkeypatch.setattr(state_module, "_TIMERS_SLACK", 0)
    run_state_machine_as_test(GroupLifecycles, settings=settings(
        max_examples=40, stateful_step_count=30, deadline=None))
