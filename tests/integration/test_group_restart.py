"""Consumer groups on a standalone broker across faults of the broker itself, with real
member processes (tests/integration/test_group_coordinator.py's CONSUMER_SCRIPT): a
restart of ``hostbroker serve`` (SIGTERM, then started again on the same log dirs and
listeners), after which the group state is gone and the members join again as new
members; a handler SIGKILLed while a rebalance waits; and a member stopped past its
session that comes back after the group emptied (its commit from outside the group
must not overwrite what the member that took its partitions committed).

What is checked: the live members settle on one generation with every partition owned
once (their own lines and the broker's DESCRIBE_GROUP agree), they consume what is
produced afterwards, every acknowledged message is consumed, duplicates are only
hand-outs that were not committed, and the group's committed offsets, read back from
the broker's offsets store file in commit order, never move back.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from types import SimpleNamespace

import pytest

from hostbroker.client import ConsumerConnector
from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.log.offsetstore import FILENAME
from tests.cluster.e2e_support import GROUP, TOPIC, check_duplicates, poll
from tests.integration.test_group_coordinator import (
    PARTITIONS,
    SETTLE_S,
    Feeder,
    Group,
    phase_of,
    settled,
    sizes,
)


class DownIsRefused:
    """The Feeder's client: a broker that is down (its socket gone) fails a produce as a
    refused connection does, so the Feeder goes on producing."""

    def __init__(self, broker):
        self.inner = broker.client()

    def produce(self, *args):
        try:
            return self.inner.produce(*args)
        except ConnectionError:
            raise
        except OSError as exc:
            raise ConnectionError(str(exc)) from exc

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def group(make_broker, tmp_path):
    """A :class:`Group` on a broker with one handler; stopped after the test."""
    broker = make_broker(**{"num.handlers": 1})
    g = Group(broker, tmp_path)
    g.feeder.stop()  # it stops on a missing socket: one that goes on instead
    g.feeder = Feeder(SimpleNamespace(client=lambda: DownIsRefused(broker)))
    yield g
    g.feeder.stop()
    for consumer in g.started:
        consumer.kill()


def describe(broker):
    client = CoordinatorClient([broker.unix], timeout=10, client_id="test")
    try:
        return client.describe_group(GROUP)
    finally:
        client.close()


def generations_since(consumer, mark: int) -> list[int]:
    """The generations ``consumer`` was given partitions in, from its line ``mark`` on."""
    return [int(line.split()[1]) for line in list(consumer.lines)[mark:]
            if line.startswith("g ")]


def settled_again(consumers, marks) -> bool:
    """Each consumer was given partitions since its mark, and the group is settled."""
    return all(generations_since(c, m) for c, m in zip(consumers, marks)) and settled(consumers)


def check_owners(broker, consumers) -> None:
    """DESCRIBE_GROUP: STABLE, the consumers' generation, every partition owned once."""
    state = describe(broker)
    assert state.phase == "STABLE"
    assert {c.current()[0] for c in consumers} == {state.generation}
    owned = sorted(p for m in state.members for a in m.assignment for p in a.partitions)
    assert owned == list(range(PARTITIONS))
    assert len(state.members) == len(consumers)


def consume_on(group, consumers) -> None:
    mark = group.feeder.sent
    for consumer in consumers:
        poll(lambda: any(int(v) >= mark for v in consumer.values()), SETTLE_S,
             "each member to consume")


def everything_consumed(group) -> None:
    group.feeder.stop()
    produced = set(group.feeder.acked)
    poll(lambda: produced <= set().union(*(c.values() for c in group.started)), SETTLE_S,
         "every acknowledged message to be consumed")


def committed_history(broker) -> dict[int, list[int]]:
    """partition -> GROUP's committed offsets of TOPIC, in the order the broker stored
    them (the records of its offsets store, docs of hostbroker/log/offsetstore.py)."""
    with open(os.path.join(broker.settings["log.dirs"], FILENAME), "rb") as f:
        data = f.read()
    out: dict[int, list[int]] = {}
    pos = 0
    while pos + 8 <= len(data):
        length, _crc = struct.unpack_from(">iI", data, pos)
        for group, topic, partition, offset, _metadata in json.loads(
                data[pos + 8:pos + 8 + length]):
            if (group, topic) == (GROUP, TOPIC):
                out.setdefault(partition, []).append(offset)
        pos += 8 + length
    assert pos == len(data)
    return out


def check_never_back(broker) -> None:
    history = committed_history(broker)
    assert sorted(history) == list(range(PARTITIONS))
    for partition, offsets in history.items():
        assert offsets == sorted(offsets), (partition, offsets)


def test_members_rejoin_after_a_broker_restart(group):
    broker = group.broker
    a, b = group.start(), group.start()
    poll(lambda: settled([a, b]), SETTLE_S, "the two members to settle")
    consume_on(group, [a, b])
    before = {m.member_id for m in describe(broker).members}
    assert len(before) == 2
    marks = [len(a.lines), len(b.lines)]

    assert broker.stop() == 0
    broker.start()

    poll(lambda: settled_again([a, b], marks), SETTLE_S, "the members to settle again")
    poll(lambda: describe(broker).phase == "STABLE", SETTLE_S, "a stable group")
    check_owners(broker, [a, b])
    after = {m.member_id for m in describe(broker).members}
    assert len(after) == 2 and not after & before  # both joined again as new members
    assert sizes([a, b]) == [6, 6]
    consume_on(group, [a, b])
    everything_consumed(group)
    for consumer in (a, b):
        consumer.stop()
        assert consumer.proc.returncode == 0
    check_duplicates([a, b])
    check_never_back(broker)


def test_the_group_settles_after_a_handler_is_killed_in_a_rebalance(group):
    broker = group.broker
    a, b, c = (group.start() for _ in range(3))
    poll(lambda: settled([a, b, c]), SETTLE_S, "three members to settle")
    # A rebalance that waits: c is stopped, b leaves, a's join waits (at the one
    # handler) for c.
    c.suspend()
    b.stop()
    poll(lambda: phase_of(broker) == "PREPARING_REBALANCE", SETTLE_S, "the rebalance")
    marks = [len(a.lines), len(c.lines)]
    handler = broker.workers()["hb-handler-0"]
    os.kill(handler, signal.SIGKILL)
    broker.wait_worker_replaced("hb-handler-0", handler)
    c.resume()
    poll(lambda: settled_again([a, c], marks), SETTLE_S, "the two members to settle")
    poll(lambda: describe(broker).phase == "STABLE", SETTLE_S, "a stable group")
    check_owners(broker, [a, c])
    assert sizes([a, c]) == [6, 6]
    consume_on(group, [a, c])
    everything_consumed(group)
    for consumer in (a, c):
        consumer.stop()
    check_duplicates([a, b, c])
    check_never_back(broker)


def last_offsets(consumer, kind: str) -> dict[int, int]:
    """partition -> the highest offset ``consumer`` handed out (``m``) or committed (``c``)."""
    out: dict[int, int] = {}
    for line in list(consumer.lines):
        words = line.split()
        if words[0] == kind:
            out[int(words[2])] = max(out.get(int(words[2]), -1), int(words[3]))
    return out


def committed_past(consumer, partition: int, offset: int) -> bool:
    """``consumer`` committed ``partition`` past a message it handed out after ``offset``."""
    later = [o for _, p, o, _ in consumer.messages() if p == partition and o > offset]
    return bool(later) and last_offsets(consumer, "c").get(partition, -1) > min(later)


def test_a_member_back_after_its_group_emptied_moves_no_offset_back(group):
    """A member stopped past its session comes back once the one that took its partitions
    (and committed past what it had handed out) has left: the group has no members then,
    so its commit from outside the group would be stored over the other's offsets."""
    sleeper = group.start(commit_ms=600000)  # nothing committed of what it hands out
    other = group.start()
    poll(lambda: settled([sleeper, other]), SETTLE_S, "the two members to settle")
    consume_on(group, [sleeper])
    sleeper.suspend()
    mine = sleeper.current()[1]
    poll(lambda: other.current()[1] == frozenset(range(PARTITIONS)), SETTLE_S,
         "the other member to take every partition")
    poll(lambda: all(committed_past(other, p, last_offsets(sleeper, "m").get(p, -1))
                     for p in mine), SETTLE_S, "the other member to commit past the stopped one")
    other.stop()  # the group is empty
    mark = len(sleeper.lines)
    sleeper.resume()
    poll(lambda: settled_again([sleeper], [mark]), SETTLE_S, "the member to take everything")
    consume_on(group, [sleeper])
    everything_consumed(group)
    sleeper.stop()
    # its commit of what it had handed out was refused: the other had committed since
    assert ErrorCode.UNKNOWN_MEMBER_ID in sleeper.refused()
    check_never_back(group.broker)
    check_duplicates([sleeper, other])


def test_a_member_shut_down_before_it_learns_of_a_restart_commits_from_outside(make_broker):
    """The last commit of a member whose broker restarted before its next heartbeat is
    refused UNKNOWN_MEMBER_ID as a member's; the group has no members, so it is stored
    from outside the group, and shutdown does not fail."""
    broker = make_broker()
    with broker.client() as client:
        client.create_topic("r", 1)
        client.produce("r", 0, encode_message_set([b"a", b"b", b"c"]))
    config = {"group.id": "late", "auto.offset.reset": "earliest", "consumer.timeout.ms": 10000,
              "fetch.wait.max.ms": 50, "auto.commit.interval.ms": 600000,
              "heartbeat.interval.ms": 60000, "session.timeout.ms": 200000}
    connector = ConsumerConnector(broker.unix, config)
    try:
        (stream,) = connector.create_message_streams({"r": 1})["r"]
        got = [next(stream) for _ in range(2)]
        generation = connector.cluster.member.generation
        assert broker.stop() == 0
        broker.start()
    finally:
        connector.shutdown()
    assert connector.cluster.member.generation == generation  # it never learned
    with broker.client() as client:
        (stored,) = client.offset_fetch("late", [("r", 0)])
    assert stored.offset == got[1].next_offset
