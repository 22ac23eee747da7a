"""Consumer groups on a standalone broker across faults of the broker itself, with real
member processes (tests/integration/test_group_coordinator.py's CONSUMER_SCRIPT): a
restart of ``hostbroker serve`` (SIGTERM, then started again on the same log dirs and
listeners), after which the group state is gone and the members join again as new
members, and a handler SIGKILLed while a rebalance waits.

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

from hostbroker.client.coordinator_requests import CoordinatorClient
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
