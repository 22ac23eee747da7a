"""The clients' leader map on a real ZooKeeper with hand-written replication nodes
(docs/spec/zookeeper.md, "Replication"), and a Producer following it to real
``hostbroker serve`` brokers.

The brokers run standalone: the test writes what the controller would (the
assignment, each partition's state) and the brokers' registrations, so a
leader "moves" when its state node is rewritten.
"""

from __future__ import annotations

import json
import time

import pytest

from hostbroker.client import Producer
from hostbroker.client.errors import BrokerError
from hostbroker.client.leaders import LeaderMap, PartitionLeader, ZooKeeperLeaders
from hostbroker.client.simple import SimpleClient
from hostbroker.cluster import paths
from hostbroker.cluster.discovery import read_snapshot
from hostbroker.errors import ErrorCode
from hostbroker.log.message import iter_messages
from hostbroker.cluster.replica_nodes import assignment_path, state_path
from tests.cluster.zkserver import ZooKeeperServer
from tests.integration.broker import Broker
from tests.integration.wire_helpers import log_end, new_topic, read_log, stop_or_kill

FAST = {"zookeeper_session_timeout_ms": 2000, "zookeeper_connection_timeout_ms": 5000}


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def zk(zookeeper):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect, timeout=5.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def register_broker(zk, broker_id: int, host="127.0.0.1", port=9000, unix=None) -> None:
    info = paths.BrokerInfo(broker_id, host, port, unix)
    zk.ensure_path(paths.BROKER_IDS)
    if zk.exists(paths.broker_path(broker_id)):
        zk.set(paths.broker_path(broker_id), paths.encode_broker(info))
    else:
        zk.create(paths.broker_path(broker_id), paths.encode_broker(info), ephemeral=True)


def write_topic(zk, topic: str, assignment: dict[int, list[int]]) -> None:
    value = {"version": 1, "partitions": {str(p): r for p, r in assignment.items()}}
    zk.create(assignment_path(topic), json.dumps(value).encode(), makepath=True)


def write_state(zk, topic: str, partition: int, leader: int, epoch: int, isr: list[int]) -> None:
    value = json.dumps({"version": 1, "leader": leader, "leader_epoch": epoch, "isr": isr,
                        "controller_epoch": 1}).encode()
    path = state_path(topic, partition)
    if zk.exists(path):
        zk.set(path, value)
    else:
        zk.create(path, value, makepath=True)


def source(zk) -> ZooKeeperLeaders:
    return ZooKeeperLeaders(zk, lambda: read_snapshot(zk).brokers)


def test_leaders_replicas_and_isr_of_each_partition(zk):
    register_broker(zk, 11, port=9011)
    register_broker(zk, 12, port=9012, unix="/tmp/b12.sock")
    topic = new_topic()
    write_topic(zk, topic, {0: [11, 12], 1: [12, 11], 2: [13, 11]})
    write_state(zk, topic, 0, 11, 3, [11, 12])
    write_state(zk, topic, 1, 12, 0, [12])
    write_state(zk, topic, 2, 13, 5, [13])  # broker 13 is not live
    leaders = source(zk).read([topic])[topic]
    assert leaders.partitions == (
        PartitionLeader(0, 11, 3, (11, 12), (11, 12)),
        PartitionLeader(1, 12, 0, (12, 11), (12,)),
        PartitionLeader(2, 13, 5, (13, 11), (13,)),
    )
    assert leaders.leader_uri(0) == (11, "tcp://127.0.0.1:9011")
    assert leaders.leader_uri(1) == (12, "unix:///tmp/b12.sock")  # Unix first
    assert leaders.leader_uri(2) is None
    assert leaders.leader_uri(3) is None


def test_a_topic_without_assignment_is_not_replicated(zk):
    topic = new_topic()
    zk.create(paths.topic_broker_path(topic, 11), b"2", makepath=True)  # 0.7 style
    found = source(zk).read([topic])
    assert found == {topic: None}
    absent = new_topic()
    assert source(zk).read([absent]) == {absent: None}


def test_a_partition_without_state_has_no_leader(zk):
    register_broker(zk, 11, port=9011)
    topic = new_topic()
    write_topic(zk, topic, {0: [11]})
    leaders = source(zk).read([topic])[topic]
    assert leaders.partitions == (PartitionLeader(0, -1, -1, (11,), ()),)
    assert leaders.leader_uri(0) is None


class Clock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


def test_map_waits_for_an_election_then_follows_it(zk):
    register_broker(zk, 11, port=9011)
    register_broker(zk, 12, port=9012)
    topic = new_topic()
    write_topic(zk, topic, {0: [11, 12]})
    write_state(zk, topic, 0, -1, 4, [])  # offline: the controller is electing
    clock = Clock()
    clock.on_sleep = lambda n: n == 2 and write_state(zk, topic, 0, 12, 5, [12])
    leaders = LeaderMap(source(zk), retry_backoff_ms=250, max_retries=5, clock=clock,
                        sleep=clock.sleep)
    assert leaders.leader(topic, 0) == (12, "tcp://127.0.0.1:9012")
    assert clock.sleeps == [0.25, 0.25]
    # a leader that moves is seen after invalidate (what a NOT_LEADER answer does)
    write_state(zk, topic, 0, 11, 6, [11, 12])
    assert leaders.leader(topic, 0) == (12, "tcp://127.0.0.1:9012")  # cached
    leaders.invalidate(topic)
    assert leaders.leader(topic, 0) == (11, "tcp://127.0.0.1:9011")
    # and after the refresh interval
    write_state(zk, topic, 0, 12, 7, [11, 12])
    clock.now += 600
    assert leaders.leader(topic, 0) == (12, "tcp://127.0.0.1:9012")


def test_map_gives_up_with_leader_not_available(zk):
    register_broker(zk, 11, port=9011)
    topic = new_topic()
    write_topic(zk, topic, {0: [11], 1: [11]})
    write_state(zk, topic, 0, -1, 0, [])
    clock = Clock()
    leaders = LeaderMap(source(zk), retry_backoff_ms=100, max_retries=3, clock=clock,
                        sleep=clock.sleep)
    with pytest.raises(BrokerError) as raised:
        leaders.leader(topic, 0)
    assert raised.value.code == ErrorCode.LEADER_NOT_AVAILABLE
    assert clock.sleeps == [0.1, 0.1, 0.1]
    with pytest.raises(BrokerError) as raised:
        leaders.leader(topic, 2)
    assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert leaders.leader(new_topic(), 0) is None  # not replicated: the caller's own way


def test_zookeeper_down_is_broker_not_available_and_keeps_what_is_known(tmp_path):
    from kazoo.client import KazooClient

    server = ZooKeeperServer(tmp_path).start()
    client = KazooClient(hosts=server.connect, timeout=2.0)
    client.start(timeout=10)
    try:
        register_broker(client, 11, port=9011)
        topic = new_topic()
        write_topic(client, topic, {0: [11]})
        write_state(client, topic, 0, 11, 0, [11])
        leaders = LeaderMap(ZooKeeperLeaders(client, lambda: {11: paths.BrokerInfo(
            11, "127.0.0.1", 9011, None)}), max_retries=0)
        assert leaders.leader(topic, 0) == (11, "tcp://127.0.0.1:9011")
        server.stop()
        leaders.invalidate(topic)
        assert leaders.leader(topic, 0) == (11, "tcp://127.0.0.1:9011")  # kept
        with pytest.raises(BrokerError) as raised:
            leaders.refresh([new_topic()])
        assert raised.value.code == ErrorCode.BROKER_NOT_AVAILABLE
    finally:
        client.stop()
        client.close()
        server.stop()


# -- a Producer following leaders to real brokers ------------------------------------


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    brokers = {}
    for broker_id in (1, 2):
        root = tmp_path_factory.mktemp(f"b{broker_id}")
        brokers[broker_id] = Broker(root, broker_id=broker_id, num_processors=1,
                                    num_handlers=1).start()
    yield brokers
    for broker in brokers.values():
        stop_or_kill(broker)


def register_real(zk, broker_id: int, broker: Broker) -> None:
    register_broker(zk, broker_id, port=broker.port, unix=broker.unix_path)


def payloads(broker: Broker, topic: str, partition: int) -> list[bytes]:
    with SimpleClient(broker.unix) as client:
        end = log_end(client, topic, partition)
        data = read_log(client, topic, partition, 0, end, max_bytes=1 << 22)
    return [m.payload for m in iter_messages(data, 0)]


def replicated_topic(zk, pair, leaders: dict[int, int]) -> str:
    """A topic of len(leaders) partitions, replicas [1, 2] or [2, 1], partition p led by
    leaders[p]; each broker holds every partition (as a replica would)."""
    topic = new_topic()
    for broker in pair.values():
        with SimpleClient(broker.unix) as client:
            client.create_topic(topic, len(leaders))
    write_topic(zk, topic, {p: [b, 3 - b] for p, b in leaders.items()})
    for p, b in leaders.items():
        write_state(zk, topic, p, b, 0, [1, 2])
    return topic


def test_producer_sends_each_partition_to_its_leader(zk, zookeeper, pair):
    for broker_id, broker in pair.items():
        register_real(zk, broker_id, broker)
    topic = replicated_topic(zk, pair, {0: 2, 1: 1, 2: 2})
    with Producer(zookeeper_connect=zookeeper.connect, **FAST) as producer:
        # before any send: known from ZooKeeper, its leaders not looked up yet (the
        # console producer must not take it for a topic that does not exist)
        deadline = time.monotonic() + 10
        while producer.partitions_for(topic) != ((-1, 0), (-1, 1), (-1, 2)):
            assert time.monotonic() < deadline, producer.partitions_for(topic)
            time.sleep(0.05)
        placed = [producer.send(topic, b"p%d" % p, partition=p) for p in range(3)]
        keyed = [producer.send(topic, b"k%d" % i, key=b"key-%d" % i) for i in range(12)]
        assert producer.partitions_for(topic) == ((2, 0), (1, 1), (2, 2))
    assert [md.partition for md in placed] == [0, 1, 2]
    assert payloads(pair[2], topic, 0)[:1] == [b"p0"]
    assert payloads(pair[1], topic, 1)[:1] == [b"p1"]
    assert payloads(pair[2], topic, 2)[:1] == [b"p2"]
    for md in keyed:  # every keyed message on partition p's leader, nowhere else
        leader = {0: 2, 1: 1, 2: 2}[md.partition]
        assert payloads(pair[3 - leader], topic, md.partition) == []


def test_producer_follows_a_leader_that_moves(zk, zookeeper, pair):
    for broker_id, broker in pair.items():
        register_real(zk, broker_id, broker)
    topic = replicated_topic(zk, pair, {0: 1})
    with Producer(zookeeper_connect=zookeeper.connect, retry_backoff_ms=50,
                  message_send_max_retries=20, **FAST) as producer:
        producer.send(topic, b"before", partition=0)
        write_state(zk, topic, 0, 2, 1, [2])
        # what a NOT_LEADER_FOR_PARTITION answer does: the producer reads the state again
        producer._dispatcher.cluster.invalidate(topic)
        producer.send(topic, b"after", partition=0)
    assert payloads(pair[1], topic, 0) == [b"before"]
    assert payloads(pair[2], topic, 0) == [b"after"]


def test_producer_waits_for_a_leader_then_sends(zk, zookeeper, pair):
    for broker_id, broker in pair.items():
        register_real(zk, broker_id, broker)
    topic = replicated_topic(zk, pair, {0: 1})
    write_state(zk, topic, 0, -1, 1, [])  # offline
    with Producer(zookeeper_connect=zookeeper.connect, retry_backoff_ms=100,
                  message_send_max_retries=50, **FAST) as producer:
        import threading

        timer = threading.Timer(0.5, write_state, (zk, topic, 0, 2, 2, [2]))
        timer.start()
        started = time.monotonic()
        md = producer.send(topic, b"waited", partition=0)
        timer.join()
    assert md.partition == 0 and time.monotonic() - started >= 0.4
    assert payloads(pair[2], topic, 0) == [b"waited"]


def test_producer_without_leader_fails_with_leader_not_available(zk, zookeeper, pair):
    from hostbroker.client.errors import DeliveryError

    for broker_id, broker in pair.items():
        register_real(zk, broker_id, broker)
    topic = replicated_topic(zk, pair, {0: 1})
    write_state(zk, topic, 0, -1, 1, [])
    with Producer(zookeeper_connect=zookeeper.connect, retry_backoff_ms=10,
                  message_send_max_retries=2, **FAST) as producer:
        with pytest.raises(DeliveryError) as raised:
            producer.send(topic, b"nowhere", partition=0)
    assert raised.value.code == ErrorCode.LEADER_NOT_AVAILABLE
