"""OFFSET_COMMIT, OFFSET_FETCH and HEARTBEAT that a processor sends the
coordinator itself (GROUP_PUTs, ``processor.direct.groups``): which go that
way, that the coordinator answers them exactly as through a handler (refused
entries, fenced commits, unknown members, answers too large), that no writer
serves any of them, that a request sent right behind one waits for it, and
that a coordinator that dies with one in hand has it answered as a handler
would answer it.

Every test keeps its own broker (``make_broker``): each either stops or kills
the coordinator or runs with settings no other test of the module uses."""

from __future__ import annotations

import os
import signal
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol import groups as gp
from tests.integration.coordinator_wire import GroupWire
from tests.integration.wire_helpers import created_topic, new_topic


def _commit_frame(group: str, entries, corr: int) -> bytes:
    return api.encode_request(api.OffsetCommitRequest(group, tuple(
        api.OffsetCommitPartition(t, p, o, m) for t, p, o, m in entries)), corr)


def _fetch_frame(group: str, entries, corr: int) -> bytes:
    return api.encode_request(api.OffsetFetchRequest(group, tuple(
        api.OffsetFetchPartition(t, p) for t, p in entries)), corr)


def _answers(wire: GroupWire, key: int):
    corr, response = wire.read_response(key)
    return corr, [(p.topic, p.partition, p.error_code) if key == api.ApiKey.OFFSET_COMMIT
                  else (p.topic, p.partition, p.offset, p.metadata, p.error_code)
                  for p in response.partitions]


@pytest.mark.parametrize("direct, puts", [(True, True), (True, False), (False, True)])
def test_who_takes_commits_fetches_and_heartbeats_and_what_they_answer(make_broker, direct,
                                                                       puts):
    # (the put rings serve GROUP_PUTs whether or not lone PRODUCEs take them)
    broker = make_broker(**{"processor.direct.groups": str(direct).lower(),
                            "processor.direct.produce": str(puts).lower(),
                            "offset.metadata.max.bytes": "16"})
    topic, group = created_topic(broker.tcp, 2), new_topic("group")
    handler_before = broker.counter("handler", "requests")
    writer_before = broker.counter("writer", "requests")
    coordinator_before = broker.counter("coordinator", "requests")
    with GroupWire(broker.tcp) as wire:
        for i in range(10):
            time.sleep(0.02)  # one at a time, the coordinator back asleep in between
            wire.send(_commit_frame(group, [(topic, 0, i, f"m{i}"), (topic, 1, 100 + i, ""),
                                            ("nope", 0, 1, ""), (topic, 0, 7, "x" * 17)], i))
            assert _answers(wire, api.ApiKey.OFFSET_COMMIT) == (i, [
                (topic, 0, ErrorCode.NONE), (topic, 1, ErrorCode.NONE),
                ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                (topic, 0, ErrorCode.INVALID_REQUEST)])
            wire.send(_fetch_frame(group, [(topic, 1), (topic, 0), (topic, 1), ("nope", 3)],
                                   100 + i))
            assert _answers(wire, api.ApiKey.OFFSET_FETCH) == (100 + i, [
                (topic, 1, 100 + i, "", 0), (topic, 0, i, f"m{i}", 0),
                (topic, 1, 100 + i, "", 0), ("nope", 3, -1, "", 0)])
            assert wire.heartbeat(group, 1, "nobody") == ErrorCode.UNKNOWN_MEMBER_ID
        # a member's heartbeats and fenced commits
        joined = wire.join(group, {topic: 1})
        generation, member = joined.generation, joined.member_id
        assert wire.sync(group, generation, member).error_code == ErrorCode.NONE
        assert wire.heartbeat(group, generation, member) == ErrorCode.NONE
        assert wire.heartbeat(group, generation + 1, member) == ErrorCode.ILLEGAL_GENERATION
        assert wire.commit(group, [(topic, 0, 50), ("nope", 0, 1)], generation + 1, member) == [
            ErrorCode.ILLEGAL_GENERATION] * 2
        assert wire.commit(group, [(topic, 0, 50)], generation, member) == [ErrorCode.NONE]
        assert wire.fetch_offsets(group, [(topic, 0)]) == [50]
        assert wire.leave(group, member) == ErrorCode.NONE
    handler = broker.counter("handler", "requests") - handler_before
    writer = broker.counter("writer", "requests") - writer_before
    coordinator = broker.counter("coordinator", "requests") - coordinator_before
    # 30 commits, fetches and heartbeats, then the member's 2 heartbeats, 2 commits and a fetch;
    # the join, the sync and the leave always take the handler; all 38 end at the coordinator
    if direct:
        assert (handler, writer, coordinator) == (3, 0, 38)
    else:
        assert (handler, writer, coordinator) == (38, 0, 38)


def test_a_fetch_sent_right_behind_a_commit_reads_it(make_broker):
    """The processor reads nothing more of a connection while its commit is at
    the coordinator (held there, stopped), so a fetch written right after it, before
    its answer, reads it. The fetch goes through the handler: a connection
    that sends while it awaits an answer is pipelining, and keeps the
    handler's way until it waits for each answer again (as for PUTs; the
    next test), hence a new one each round."""
    broker = make_broker()
    topic, group = created_topic(broker.tcp), new_topic("group")
    coordinator = broker.workers()["hb-coordinator"]
    for i in range(3):
        with GroupWire(broker.unix) as wire:
            handler_before = broker.counter("handler", "requests")
            time.sleep(0.2)  # asleep again
            os.kill(coordinator, signal.SIGSTOP)
            try:
                wire.send(_commit_frame(group, [(topic, 0, i, f"r{i}")], 2 * i))
                time.sleep(0.1)  # read alone: past the handler
                wire.send(_fetch_frame(group, [(topic, 0)], 2 * i + 1))
                time.sleep(0.1)
            finally:
                os.kill(coordinator, signal.SIGCONT)
            assert _answers(wire, api.ApiKey.OFFSET_COMMIT) == (2 * i, [(topic, 0, 0)])
            assert _answers(wire, api.ApiKey.OFFSET_FETCH) == (2 * i + 1,
                                                              [(topic, 0, i, f"r{i}", 0)])
            assert broker.counter("handler", "requests") - handler_before == 1  # the fetch


def test_after_pipelining_lone_ones_go_past_the_handler_again(make_broker):
    """A connection that sent a fetch behind its commit goes through the
    handler until ``processor.direct.lone.after`` (here 3) of its requests
    in a row came alone (the fetch behind the commit, read alone once the
    commit was answered, is the first); then past it again."""
    broker = make_broker(**{"processor.direct.lone.after": "3"})
    topic, group = created_topic(broker.tcp), new_topic("group")
    coordinator = broker.workers()["hb-coordinator"]
    ways = []
    with GroupWire(broker.unix) as wire:
        time.sleep(0.2)
        os.kill(coordinator, signal.SIGSTOP)
        try:
            wire.send(_commit_frame(group, [(topic, 0, 7, "")], 1))
            time.sleep(0.1)
            wire.send(_fetch_frame(group, [(topic, 0)], 2))
            time.sleep(0.1)
        finally:
            os.kill(coordinator, signal.SIGCONT)
        assert _answers(wire, api.ApiKey.OFFSET_COMMIT) == (1, [(topic, 0, 0)])
        assert _answers(wire, api.ApiKey.OFFSET_FETCH) == (2, [(topic, 0, 7, "", 0)])
        for corr in range(3, 7):
            before = broker.counter("handler", "requests")
            wire.send(_fetch_frame(group, [(topic, 0)], corr))
            assert _answers(wire, api.ApiKey.OFFSET_FETCH) == (corr, [(topic, 0, 7, "", 0)])
            ways.append(broker.counter("handler", "requests") - before)
    assert ways == [1, 1, 0, 0]


def test_an_answer_over_the_response_bound_closes_the_connection(make_broker):
    broker = make_broker(**{"response.max.bytes": "65536"})
    topic, group = created_topic(broker.tcp), new_topic("group")
    with GroupWire(broker.tcp) as wire:
        wire.send(_commit_frame(group, [(topic, 0, 1, "m" * 4000)], 1))
        assert _answers(wire, api.ApiKey.OFFSET_COMMIT) == (1, [(topic, 0, 0)])
    handler_before = broker.counter("handler", "requests")
    with GroupWire(broker.tcp) as wire:
        wire.send(_fetch_frame(group, [(topic, 0)] * 20, 9))  # 80,000 bytes of metadata
        wire.assert_error_frame(9, ErrorCode.INVALID_REQUEST)
        wire.assert_closed()
    assert broker.counter("handler", "requests") == handler_before
    with GroupWire(broker.tcp) as wire:  # the broker goes on
        assert wire.fetch_offsets(group, [(topic, 0)] * 16) == [1] * 16


@pytest.mark.parametrize("kind", ["commit", "fetch", "heartbeat"])
def test_one_the_coordinator_never_answered_is_answered_as_a_handler_would(make_broker, kind):
    broker = make_broker()
    topic, group = created_topic(broker.tcp), new_topic("group")
    frames = {
        "commit": lambda corr: _commit_frame(group, [(topic, 0, 5, ""), ("nope", 0, 1, "")],
                                             corr),
        "fetch": lambda corr: _fetch_frame(group, [(topic, 0)], corr),
        "heartbeat": lambda corr: api.encode_request(gp.HeartbeatRequest(group, 1, "m"), corr),
    }
    coordinator = broker.workers()["hb-coordinator"]
    with GroupWire(broker.tcp, timeout=30) as wire:
        assert wire.commit(group, [(topic, 0, 3)]) == [ErrorCode.NONE]
        time.sleep(0.3)  # asleep again
        os.kill(coordinator, signal.SIGSTOP)  # holds the next one unread, then dies with it
        wire.send(frames[kind](2))
        time.sleep(0.3)
        os.kill(coordinator, signal.SIGKILL)
        broker.wait_worker_replaced("hb-coordinator", coordinator)
        if kind == "heartbeat":
            assert wire.answer(gp.HeartbeatRequest).error_code == ErrorCode.BROKER_NOT_AVAILABLE
        elif kind == "commit":
            assert _answers(wire, api.ApiKey.OFFSET_COMMIT) == (2, [
                (topic, 0, ErrorCode.UNKNOWN), ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])
        else:
            assert _answers(wire, api.ApiKey.OFFSET_FETCH) == (2, [
                (topic, 0, -1, "", ErrorCode.UNKNOWN)])
        # the connection goes on, with the replacement
        assert wire.fetch_offsets(group, [(topic, 0)]) == [3]


def test_requests_of_more_partitions_than_the_bound_take_the_handler(make_broker):
    broker = make_broker(**{"processor.direct.groups.max.partitions": "2"})
    topic, group = created_topic(broker.tcp, 3), new_topic("group")
    with GroupWire(broker.tcp) as wire:
        for entries, through_handler in (([(topic, 0), (topic, 1)], 0),
                                         ([(topic, 0), (topic, 1), (topic, 2)], 1)):
            handler_before = broker.counter("handler", "requests")
            assert wire.commit(group, [(t, p, 7) for t, p in entries]) == [0] * len(entries)
            assert wire.fetch_offsets(group, entries) == [7] * len(entries)
            handler = broker.counter("handler", "requests") - handler_before
            assert handler == 2 * through_handler, (entries, handler)
