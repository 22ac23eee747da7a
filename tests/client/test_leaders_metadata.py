"""The leader map's METADATA v1 side, pure: answers of several brokers merged into
each partition's leader (the highest leader epoch wins), hostile entries left out,
and the map's retries with an injected clock."""

from __future__ import annotations

import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.client.leaders import (LeaderMap, MetadataLeaders, PartitionLeader,
                                       leader_moved, merge_metadata)
from hostbroker.errors import ErrorCode
from hostbroker.protocol.replication import (MetadataBroker, MetadataPartitionV1,
                                             MetadataResponseV1, MetadataTopicV1)

BROKERS = (MetadataBroker(1, "127.0.0.1", 9001, "/tmp/b1.sock"),
           MetadataBroker(2, "127.0.0.1", 9002, None),
           MetadataBroker(3, "127.0.0.1", 9003, None))


def part(p, leader, epoch, replicas, isr=None, code=ErrorCode.NONE):
    return MetadataPartitionV1(p, code, leader, epoch, tuple(replicas),
                               tuple(replicas if isr is None else isr), 0, 0, None)


def answer(broker_id, topic, parts, brokers=BROKERS, code=ErrorCode.NONE):
    return MetadataResponseV1(broker_id, 1, brokers, (MetadataTopicV1(topic, code, tuple(parts)),))


def test_each_partition_at_its_leader_from_the_answers_of_the_replicas():
    answers = [
        ("tcp://127.0.0.1:9001", answer(1, "t", [part(0, 1, 2, [1, 2]), part(2, 3, 0, [3, 1])])),
        ("tcp://127.0.0.1:9002", answer(2, "t", [part(0, 1, 2, [1, 2]), part(1, 2, 5, [2, 3])])),
    ]
    leaders = merge_metadata("t", answers)
    assert leaders.partitions == (PartitionLeader(0, 1, 2, (1, 2), (1, 2)),
                                  PartitionLeader(1, 2, 5, (2, 3), (2, 3)),
                                  PartitionLeader(2, 3, 0, (3, 1), (3, 1)))
    # a broker reached at a URI keeps it; the others from the answers' broker lists
    assert leaders.leader_uri(0) == (1, "tcp://127.0.0.1:9001")
    assert leaders.leader_uri(1) == (2, "tcp://127.0.0.1:9002")
    assert leaders.leader_uri(2) == (3, "tcp://127.0.0.1:9003")


def test_the_newest_leader_epoch_wins_over_a_broker_that_has_not_heard():
    answers = [
        ("tcp://127.0.0.1:9001", answer(1, "t", [part(0, 1, 3, [1, 2])])),  # stale
        ("tcp://127.0.0.1:9002", answer(2, "t", [part(0, 2, 4, [1, 2], [2])])),
    ]
    assert merge_metadata("t", answers).partitions[0] == PartitionLeader(0, 2, 4, (1, 2), (2,))
    assert merge_metadata("t", answers[::-1]).partitions[0].leader == 2


def test_unix_listener_when_reached_over_unix():
    answers = [("unix:///tmp/b2.sock", answer(2, "t", [part(0, 1, 0, [1, 2])]))]
    assert merge_metadata("t", answers).leader_uri(0) == (1, "unix:///tmp/b1.sock")


def test_an_unreplicated_topic_is_none():
    # a broker's own partitions: epoch -1, itself the one replica and the leader
    answers = [("tcp://127.0.0.1:9001", answer(1, "t", [part(0, 1, -1, [1]),
                                                        part(1, 1, -1, [1])])),
               ("tcp://127.0.0.1:9002", answer(2, "u", [part(0, 2, 0, [2, 1])])),
               ("tcp://127.0.0.1:9003", answer(3, "one", [part(0, 3, 0, [3])]))]
    assert merge_metadata("t", answers) is None
    assert merge_metadata("absent", answers) is None
    assert merge_metadata("u", answers) is not None
    assert merge_metadata("one", answers).leader_uri(0) == (3, "tcp://127.0.0.1:9003")


def test_a_topic_no_listed_broker_holds_is_asked_of_the_brokers_they_name():
    asked = []

    def ask(uri, topics):
        asked.append((uri, topics))
        if uri == "tcp://127.0.0.1:9001":  # holds no replica of t
            return MetadataResponseV1(1, 2, BROKERS, (MetadataTopicV1(
                "t", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()),))
        if uri == "tcp://127.0.0.1:9002":
            raise ConnectionRefusedError("down")
        return answer(3, "t", [part(0, 3, 4, [3, 2])])

    found = MetadataLeaders(["tcp://127.0.0.1:9001"], ask).read(["t"])
    assert found["t"].leader_uri(0) == (3, "tcp://127.0.0.1:9003")
    assert [uri for uri, _ in asked] == ["tcp://127.0.0.1:9001", "tcp://127.0.0.1:9002",
                                         "tcp://127.0.0.1:9003"]


def test_leaderless_and_missing_partitions_have_no_leader():
    answers = [("tcp://127.0.0.1:9001", answer(1, "t", [
        part(0, -1, 3, [1, 2], [], code=ErrorCode.LEADER_NOT_AVAILABLE),
        part(2, 7, 1, [7, 1])]))]  # broker 7: no listener known
    leaders = merge_metadata("t", answers)
    assert [p.leader for p in leaders.partitions] == [-1, -1, 7]
    assert [leaders.leader_uri(p) for p in range(3)] == [None, None, None]


def test_hostile_entries_are_left_out():
    answers = [("tcp://127.0.0.1:9001", answer(1, "t", [
        part(0, 2, 0, [1, 2]),
        part(1, 2, 0, [2, 2]),  # a replica twice
        part(2, 2, 0, list(range(1, 11))),  # more than MAX_REPLICAS
        part(1 << 30, 2, 0, [1, 2]),  # a partition number far past the others
        part(10_000, 2, 0, [1, 2]),  # past an assignment's bound: no 10,000 placeholders
        part(3, 2, 0, [1, 2], code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ], brokers=BROKERS + (MetadataBroker(9, "bad", 0, None),)))]
    leaders = merge_metadata("t", answers)
    assert len(leaders.partitions) == 1
    assert leaders.leader_uri(0) == (2, "tcp://127.0.0.1:9002")


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def test_map_asks_every_broker_and_retries_until_a_leader_is_elected():
    state = {"leader": -1, "asked": []}

    def ask(uri, topics):
        state["asked"].append(uri)
        if uri.endswith("9003"):
            raise ConnectionRefusedError("down")
        return answer(int(uri[-1]), "t", [part(0, state["leader"], 1, [1, 2])])

    clock = Clock()

    def elect(s):
        clock.sleep(s)
        state["leader"] = 2

    leaders = LeaderMap(MetadataLeaders(["tcp://127.0.0.1:9001", "tcp://127.0.0.1:9002",
                                         "tcp://127.0.0.1:9003"], ask),
                        retry_backoff_ms=200, max_retries=3, clock=clock, sleep=elect)
    assert leaders.leader("t", 0) == (2, "tcp://127.0.0.1:9002")
    assert clock.sleeps == [0.2]
    assert state["asked"].count("tcp://127.0.0.1:9003") == 2


def test_map_raises_the_last_error_when_no_broker_answers():
    def ask(uri, topics):
        raise ConnectionRefusedError(f"cannot reach {uri}")

    leaders = LeaderMap(MetadataLeaders(["tcp://127.0.0.1:9001"], ask))
    with pytest.raises(ConnectionRefusedError):
        leaders.leader("t", 0)
    assert leader_moved(ConnectionRefusedError())
    assert leader_moved(BrokerError(ErrorCode.NOT_LEADER_FOR_PARTITION))
    assert not leader_moved(BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
