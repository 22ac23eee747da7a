"""The group coordinator of a real broker, over raw group requests (docs/spec/groups.md).

One broker for the module (short session bounds, few parked joins); each
test uses groups and topics of its own. The fault tests start brokers of
their own and SIGKILL a handler or the coordinator (``hb-coordinator``).
"""

from __future__ import annotations

import os
import signal

from hostbroker.errors import ErrorCode
from tests.integration.coordinator_wire import GroupWire, Member, assignment, poll, settled
from tests.integration.wire_helpers import module_broker, new_topic

E = ErrorCode
served = module_broker(**{"group.min.session.timeout.ms": 200,
                          "group.max.session.timeout.ms": 20000,
                          "group.max.members": 3, "group.max.groups": 6,
                          "group.max.parked.joins": 3, "num.handlers": 1})


def _topic(served, partitions: int) -> str:
    topic = new_topic("g")
    with served.client() as c:
        c.create_topic(topic, partitions)
    return topic


def _group(name: str = "grp") -> str:
    return new_topic(name)


def test_lone_member_then_second_then_leave(served):
    topic, group = _topic(served, 4), _group()
    with GroupWire(served.unix, "a") as a, GroupWire(served.tcp, "b") as b:
        ja = a.join(group, {topic: 1})
        assert ja.error_code == E.NONE and ja.generation == 1 and ja.members == (ja.member_id,)
        assert ja.member_id.startswith("a-")
        assert assignment(a.sync(group, 1, ja.member_id)) == {(topic, 0): (0, 1, 2, 3)}
        assert a.heartbeat(group, 1, ja.member_id) == E.NONE

        b.send_join(group, {topic: 1})  # waits for a to rejoin
        assert poll(lambda: a.heartbeat(group, 1, ja.member_id) == E.REBALANCE_IN_PROGRESS)
        assert a.sync(group, 1, ja.member_id).error_code == E.REBALANCE_IN_PROGRESS
        ja2 = a.join(group, {topic: 1}, ja.member_id)
        jb = b.join_answer()
        assert ja2.generation == jb.generation == 2
        assert ja2.members == jb.members == tuple(sorted([ja.member_id, jb.member_id]))
        first, second = ja2.members
        owned = {m: assignment((a if m == ja.member_id else b).sync(group, 2, m))
                 for m in ja2.members}
        assert owned == {first: {(topic, 0): (0, 1)}, second: {(topic, 0): (2, 3)}}
        assert b.heartbeat(group, 1, jb.member_id) == E.ILLEGAL_GENERATION

        assert b.leave(group, jb.member_id) == E.NONE
        assert b.leave(group, jb.member_id) == E.UNKNOWN_MEMBER_ID
        assert poll(lambda: a.heartbeat(group, 2, ja.member_id) == E.REBALANCE_IN_PROGRESS)
        ja3 = a.join(group, {topic: 1}, ja.member_id)
        assert (ja3.generation, ja3.members) == (3, (ja.member_id,))
        assert assignment(a.sync(group, 3, ja.member_id)) == {(topic, 0): (0, 1, 2, 3)}
        d = a.describe(group)
        assert (d.phase, d.generation) == ("STABLE", 3)
        assert [(m.member_id, m.client_id, m.session_timeout_ms) for m in d.members] == [
            (ja.member_id, "a", 3000)]
        assert [(s.topic, s.stream, s.partitions) for s in d.members[0].assignment] == [
            (topic, 0, (0, 1, 2, 3))]
        assert group in a.list_groups()
        assert a.leave(group, ja.member_id) == E.NONE
        d = a.describe(group)
        assert (d.error_code, d.phase, d.generation, d.members) == (E.NONE, "EMPTY", 0, ())
        assert group not in a.list_groups()


def test_session_expiry_and_missed_rebalance(served):
    topic, group = _topic(served, 2), _group()
    with GroupWire(served.unix, "a") as a, GroupWire(served.unix, "b") as b:
        ja = a.join(group, {topic: 1}, session_ms=1000)
        b.send_join(group, {topic: 2}, session_ms=20000, rebalance_ms=400)
        # a never rejoins: the rebalance would wait 3000 ms (a's rebalance timeout),
        # but a's session (1000 ms) ends first, which completes it at once
        jb = b.join_answer()
        assert (jb.generation, jb.members) == (2, (jb.member_id,))
        assert assignment(b.sync(group, 2, jb.member_id)) == {(topic, 0): (0,), (topic, 1): (1,)}
        assert a.heartbeat(group, 1, ja.member_id) == E.UNKNOWN_MEMBER_ID
        assert a.join(group, {topic: 1}, ja.member_id).error_code == E.UNKNOWN_MEMBER_ID

        # b heartbeats but does not rejoin a rebalance: dropped at the end of the wait
        a.send_join(group, {topic: 1}, session_ms=20000, rebalance_ms=400)
        assert poll(lambda: b.heartbeat(group, 2, jb.member_id) == E.REBALANCE_IN_PROGRESS)
        ja2 = a.join_answer()  # the wait is b's 400 ms (a's join started it, a's too)
        assert (ja2.generation, ja2.members) == (3, (ja2.member_id,))
        assert b.heartbeat(group, 2, jb.member_id) == E.UNKNOWN_MEMBER_ID
        assert a.leave(group, ja2.member_id) == E.NONE


def test_commit_fencing(served):
    topic, group = _topic(served, 2), _group()
    with GroupWire(served.unix, "a") as a, GroupWire(served.unix, "b") as b:
        # no members: outside commits stored, member commits refused
        assert a.commit(group, [(topic, 0, 5)]) == [E.NONE]
        assert a.commit(group, [(topic, 0, 6)], generation=-1) == [E.NONE]
        assert a.commit(group, [(topic, 0, 7)], 1, "a-x") == [E.UNKNOWN_MEMBER_ID]
        assert a.fetch_offsets(group, [(topic, 0)]) == [6]
        ja = a.join(group, {topic: 1})
        m = ja.member_id
        # has members: outside (v0, v1 -1) refused, every entry with one code
        assert a.commit(group, [(topic, 0, 8), ("nope", 0, 1)]) == [E.UNKNOWN_MEMBER_ID] * 2
        assert a.commit(group, [(topic, 0, 8)], generation=-1) == [E.UNKNOWN_MEMBER_ID]
        assert a.commit(group, [(topic, 0, 8)], 1, "a-unknown") == [E.UNKNOWN_MEMBER_ID]
        assert a.commit(group, [(topic, 0, 8)], 2, m) == [E.ILLEGAL_GENERATION]
        assert a.commit(group, [(topic, 0, 9), (topic, 7, 1)], 1, m) == [
            E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
        # while a rebalance waits, the current generation still commits
        b.send_join(group, {topic: 1})
        assert poll(lambda: a.heartbeat(group, 1, m) == E.REBALANCE_IN_PROGRESS)
        assert a.commit(group, [(topic, 0, 10)], 1, m) == [E.NONE]
        a.join(group, {topic: 1}, m)
        jb = b.join_answer()
        assert a.commit(group, [(topic, 0, 11)], 1, m) == [E.ILLEGAL_GENERATION]
        assert a.fetch_offsets(group, [(topic, 0)]) == [10]
        assert b.commit(group, [(topic, 1, 3)], 2, jb.member_id) == [E.NONE]
        assert a.leave(group, m) == E.NONE
        assert b.leave(group, jb.member_id) == E.NONE
        assert a.commit(group, [(topic, 0, 12)]) == [E.NONE]
        assert a.fetch_offsets(group, [(topic, 0), (topic, 1)]) == [12, 3]


def test_limits(served):
    topic = _topic(served, 1)
    group = _group()
    with GroupWire(served.unix, "a") as a:
        assert a.join(group, {topic: 1}, session_ms=199).error_code == E.INVALID_SESSION_TIMEOUT
        assert a.join(group, {topic: 1}, session_ms=20001).error_code == E.INVALID_SESSION_TIMEOUT
        members = []
        for _ in range(3):  # each new member rebalances: every known one rejoins
            a.send_join(group, {topic: 1})
            for mid in members:
                a.send_join(group, {topic: 1}, mid)
            answers = [a.join_answer() for _ in range(len(members) + 1)]
            members = list(answers[0].members)
        assert len(members) == 3
        too_many = a.join(group, {topic: 1})
        assert (too_many.error_code, too_many.generation) == (E.GROUP_TOO_LARGE, -1)
        for mid in members:
            assert a.leave(group, mid) == E.NONE
    # groups: the module broker allows 6 groups with members
    with GroupWire(served.unix, "a") as a:
        existing = len(a.list_groups())
        names = [_group("lim") for _ in range(6 - existing)]
        joined = [(g, a.join(g, {topic: 1}).member_id) for g in names]
        assert a.join(_group("lim"), {topic: 1}).error_code == E.TOO_MANY_GROUPS
        for g, mid in joined:
            assert a.leave(g, mid) == E.NONE


def test_parked_joins_bounded(served):
    """The handler holds 3 waiting joins; one more is refused at once, a's rejoin
    too (so a misses the rebalance and is dropped at the end of its wait)."""
    topic = _topic(served, 1)
    groups = [_group("park") for _ in range(3)]
    with GroupWire(served.unix, "a") as a, GroupWire(served.unix, "b") as b:
        firsts = [a.join(g, {topic: 1}, session_ms=20000, rebalance_ms=3000).member_id
                  for g in groups]
        for g in groups:  # each waits for the group's first member to rejoin
            b.send_join(g, {topic: 1}, session_ms=20000, rebalance_ms=3000)
        for g, m in zip(groups, firsts):  # the three are at the coordinator: parked
            assert poll(lambda: a.heartbeat(g, 1, m) == E.REBALANCE_IN_PROGRESS)
        b.send_join(groups[0], {topic: 1}, session_ms=20000)  # one over the handler's 3
        refused = a.join(groups[0], {topic: 1}, firsts[0])
        assert (refused.error_code, refused.member_id) == (E.BROKER_NOT_AVAILABLE, firsts[0])
        # answers in b's order: the refusal comes behind the three parked ones
        answers = [b.join_answer() for _ in range(4)]
        assert [x.error_code for x in answers] == [E.NONE] * 3 + [E.BROKER_NOT_AVAILABLE]
        for g, first, x in zip(groups, firsts, answers):
            assert (x.generation, x.members) == (2, (x.member_id,))
            assert a.heartbeat(g, 1, first) == E.UNKNOWN_MEMBER_ID
            assert b.leave(g, x.member_id) == E.NONE
        d = a.describe(groups[0])
        assert (d.phase, d.members) == ("EMPTY", ())


def test_partition_count_change_rebalances(served):
    group = _group()
    topic = new_topic("later")  # not there yet: its streams own nothing
    with GroupWire(served.unix, "a") as a:
        ja = a.join(group, {topic: 2}, session_ms=20000)
        assert assignment(a.sync(group, 1, ja.member_id)) == {(topic, 0): (), (topic, 1): ()}
        with served.client() as c:
            c.create_topic(topic, 3)
        assert poll(lambda: a.heartbeat(group, 1, ja.member_id) == E.REBALANCE_IN_PROGRESS)
        ja2 = a.join(group, {topic: 2}, ja.member_id)
        assert ja2.generation == 2
        assert assignment(a.sync(group, 2, ja.member_id)) == {(topic, 0): (0, 1), (topic, 1): (2,)}
        assert a.leave(group, ja.member_id) == E.NONE


def _fault_broker(make_broker):
    return make_broker(**{"group.min.session.timeout.ms": 200, "num.handlers": 1,
                          "worker.heartbeat.timeout.ms": 1000})


def _settle(members, partitions, timeout=30.0):
    for m in members:
        m.start()
    try:
        generation = poll(lambda: settled(members, partitions), timeout=timeout)
    except AssertionError:
        raise AssertionError(f"not settled: {[(m.state, m.errors[-3:]) for m in members]}")
    return generation


def test_handler_killed_with_a_join_parked(make_broker):
    broker = _fault_broker(make_broker)
    topic, group = _topic(broker, 4), _group()
    with GroupWire(broker.unix, "a") as a, GroupWire(broker.unix, "b") as b:
        ja = a.join(group, {topic: 1}, session_ms=10000, rebalance_ms=10000)
        b.send_join(group, {topic: 1}, session_ms=1000, rebalance_ms=10000)
        assert poll(lambda: a.heartbeat(group, 1, ja.member_id) == E.REBALANCE_IN_PROGRESS)
        handler = broker.workers()["hb-handler-0"]
        os.kill(handler, signal.SIGKILL)
        broker.wait_worker_replaced("hb-handler-0", handler)
    first = Member(broker.unix, group, {topic: 1}, "a")
    second = Member(broker.tcp, group, {topic: 1}, "b")
    first.member_id = ja.member_id  # rejoins as the member it was
    try:
        generation = _settle([first, second], {topic: 4})
        with GroupWire(broker.unix) as w:
            d = poll(lambda: (lambda d: d if d.phase == "STABLE" and len(d.members) == 2
                              else None)(w.describe(group)))
        assert d.generation >= generation
        assert {m.member_id for m in d.members} == {ja.member_id, second.member_id}
    finally:
        first.stop()
        second.stop()


def test_coordinator_killed_during_a_rebalance(make_broker):
    broker = _fault_broker(make_broker)
    topic, group = _topic(broker, 4), _group()
    with GroupWire(broker.unix, "a") as a, GroupWire(broker.unix, "b") as b:
        ja = a.join(group, {topic: 1}, session_ms=10000, rebalance_ms=10000)
        assert a.commit(group, [(topic, 0, 7)], 1, ja.member_id) == [E.NONE]
        # b's session outlasts a loaded machine's replacement of the coordinator: the
        # rebalance it began is over once it expires, and a's generation 1 stable again
        b.send_join(group, {topic: 1}, session_ms=6000, rebalance_ms=10000)
        assert poll(lambda: a.heartbeat(group, 1, ja.member_id) == E.REBALANCE_IN_PROGRESS)
        coordinator = broker.workers()["hb-coordinator"]
        os.kill(coordinator, signal.SIGKILL)
        broker.wait_worker_replaced("hb-coordinator", coordinator)
        failed = b.join_answer()  # the parked join fails as pending requests do
        assert (failed.error_code, failed.generation) == (E.BROKER_NOT_AVAILABLE, -1)
        # the replacement reloaded the group: still rebalancing generation 1, a still in it
        codes = []
        try:
            poll(lambda: codes.append(a.heartbeat(group, 1, ja.member_id))
                 or codes[-1] == E.REBALANCE_IN_PROGRESS)
        except AssertionError:
            raise AssertionError(f"a's heartbeats after the reload: {sorted(set(codes))}")
        assert a.fetch_offsets(group, [(topic, 0)]) == [7]
    first = Member(broker.unix, group, {topic: 1}, "a")
    second = Member(broker.tcp, group, {topic: 1}, "b")
    first.member_id = ja.member_id
    try:
        _settle([first, second], {topic: 4})
        with GroupWire(broker.unix) as w:
            d = poll(lambda: (lambda d: d if d.phase == "STABLE" and len(d.members) == 2
                              else None)(w.describe(group)))
        assert {m.member_id for m in d.members} == {ja.member_id, second.member_id}
    finally:
        first.stop()
        second.stop()


def _park(a, c, group, topic) -> None:
    """c's join to ``group`` waits at the coordinator (describe shows it); refused
    (BROKER_NOT_AVAILABLE) while the handler has not yet seen b's close, it
    is sent again."""
    for _ in range(20):
        c.send_join(group, {topic: 1}, session_ms=20000)
        try:
            poll(lambda: len(a.describe(group).members) == 3, timeout=0.5)
            return
        except AssertionError:
            assert c.join_answer().error_code == E.BROKER_NOT_AVAILABLE
    raise AssertionError("the closed connection's joins stayed counted")


def test_a_closed_connection_frees_its_parked_joins(served):
    """b parks 3 joins (the handler's bound) and closes; c's 2 joins and a's
    rejoin then park again (with b's still counted, they would be refused)."""
    topic = _topic(served, 1)
    groups = [_group("freed") for _ in range(3)]
    with GroupWire(served.unix, "a") as a:
        firsts = [a.join(g, {topic: 1}, session_ms=20000, rebalance_ms=20000).member_id
                  for g in groups]
        with GroupWire(served.unix, "b") as b:
            for g in groups:
                b.send_join(g, {topic: 1}, session_ms=300)
            for g, m in zip(groups, firsts):
                assert poll(lambda: a.heartbeat(g, 1, m) == E.REBALANCE_IN_PROGRESS)
        with GroupWire(served.unix, "c") as c:
            for g in groups[:2]:
                _park(a, c, g, topic)
            rejoined = [a.join(g, {topic: 1}, m) for g, m in zip(groups[:2], firsts)]
            assert [(x.error_code, x.generation) for x in rejoined] == [(E.NONE, 2)] * 2
            answers = [c.join_answer() for _ in range(2)]
            assert [(x.error_code, x.generation) for x in answers] == [(E.NONE, 2)] * 2
            for g, x in zip(groups, answers):
                assert c.leave(g, x.member_id) == E.NONE
        for g, m in zip(groups, firsts):
            assert a.leave(g, m) == E.NONE
