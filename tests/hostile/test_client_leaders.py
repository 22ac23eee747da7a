"""Standing cases: whoever can write ZooKeeper's replication nodes, or answer a
client's METADATA v1, against the clients' leader map (issue 35).

A forged assignment or state node leaves its topic LEADER_NOT_AVAILABLE or its
partition leaderless, with one reported line, and the other topics are still
led; a node past the size bound is not parsed; a hostile METADATA v1 answer
over a real socket (replica lists that break the codec, a partition number of
a billion) costs the client one refused answer or nothing, never memory of the
size it claims. Real ZooKeeper, real sockets.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.client.leaders import LeaderMap, MetadataLeaders, ZooKeeperLeaders
from hostbroker.client.simple import SimpleClient
from hostbroker.cluster import paths
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol.primitives import Writer
from hostbroker.cluster.replica_nodes import assignment_path, state_path
from tests.cluster.zkfixtures import Said, kazoo, zkserver  # noqa: F401 - fixture
from tests.integration.wire_helpers import new_topic


@pytest.fixture(scope="module")
def zk(zkserver):  # noqa: F811 - the imported fixture
    with kazoo(zkserver.connect) as client:
        yield client


LIVE = {1: paths.BrokerInfo(1, "127.0.0.1", 9001, None),
        2: paths.BrokerInfo(2, "127.0.0.1", 9002, None)}


def good_topic(zk) -> str:
    topic = new_topic()
    zk.create(assignment_path(topic), json.dumps(
        {"version": 1, "partitions": {"0": [1, 2]}}).encode(), makepath=True)
    zk.create(state_path(topic, 0), json.dumps(
        {"version": 1, "leader": 2, "leader_epoch": 1, "isr": [2, 1],
         "controller_epoch": 1}).encode(), makepath=True)
    return topic


@pytest.mark.parametrize("value, words", [
    (b"{" * 100_000, "nested deeper"),
    (b'{"version":1,,"partitions":7}', "not JSON"),
    (json.dumps({"version": 1, "partitions": {str(p): [1] for p in range(12_000)}},
                separators=(",", ":")).encode(),
     "over zookeeper.max.partitions.per.registration"),
    (json.dumps({"version": 1, "partitions": {"0": [1], "5": [1]}}).encode(),
     "not numbered 0 to 1"),
    (json.dumps({"version": 1, "partitions": {"0": list(range(1, 20))}}).encode(), "0"),
    (json.dumps({"version": 1, "partitions": {"0": [1, 1]}}).encode(), "0"),
    (b"x" * 300_000, "zookeeper.max.node.bytes"),
], ids=["deep", "not-json", "too-many", "holes", "too-many-replicas", "repeated", "huge"])
def test_a_forged_assignment_makes_only_its_topic_leaderless(zk, value, words):
    forged, good = new_topic(), good_topic(zk)
    zk.create(assignment_path(forged), value, makepath=True)
    said = Said()
    leaders = LeaderMap(ZooKeeperLeaders(zk, lambda: LIVE, report=said), max_retries=0)
    started = time.monotonic()
    with pytest.raises(BrokerError) as raised:
        leaders.leader(forged, 0)
    assert time.monotonic() - started < 2
    assert raised.value.code == ErrorCode.LEADER_NOT_AVAILABLE
    assert any(words in problem for _, problem in said.lines), said.lines
    assert leaders.leader(good, 0) == (2, "tcp://127.0.0.1:9002")


@pytest.mark.parametrize("state, words", [
    ({"version": 1, "leader": 7, "leader_epoch": 1, "isr": [7], "controller_epoch": 1},
     "not one of the replicas"),
    ({"version": 1, "leader": 1, "leader_epoch": 1, "isr": [1, 9], "controller_epoch": 1},
     "not within the replicas"),
    ({"version": 1, "leader": 1, "leader_epoch": -5, "isr": [1], "controller_epoch": 1},
     "leader_epoch"),
    ({"version": 1, "leader": "1", "leader_epoch": 1, "isr": [1], "controller_epoch": 1},
     "leader"),
])
def test_a_forged_state_makes_only_its_partition_leaderless(zk, state, words):
    topic = new_topic()
    zk.create(assignment_path(topic), json.dumps(
        {"version": 1, "partitions": {"0": [1, 2], "1": [2, 1]}}).encode(), makepath=True)
    zk.create(state_path(topic, 0), json.dumps(state).encode(), makepath=True)
    zk.create(state_path(topic, 1), json.dumps(
        {"version": 1, "leader": 2, "leader_epoch": 0, "isr": [2], "controller_epoch": 1}
    ).encode(), makepath=True)
    said = Said()
    found = ZooKeeperLeaders(zk, lambda: LIVE, report=said).read([topic])[topic]
    assert found.partitions[0].leader == -1
    assert found.leader_uri(0) is None
    assert found.leader_uri(1) == (2, "tcp://127.0.0.1:9002")
    assert any(words in problem for _, problem in said.lines), said.lines


def test_a_leader_that_is_not_live_is_never_sent_to(zk):
    topic = new_topic()
    zk.create(assignment_path(topic), json.dumps(
        {"version": 1, "partitions": {"0": [3, 1]}}).encode(), makepath=True)
    zk.create(state_path(topic, 0), json.dumps(
        {"version": 1, "leader": 3, "leader_epoch": 2, "isr": [3], "controller_epoch": 1}
    ).encode(), makepath=True)
    slept = []
    leaders = LeaderMap(ZooKeeperLeaders(zk, lambda: LIVE), max_retries=2,
                        sleep=slept.append)
    with pytest.raises(BrokerError) as raised:
        leaders.leader(topic, 0)
    assert raised.value.code == ErrorCode.LEADER_NOT_AVAILABLE
    assert slept == [0.1, 0.1]


# -- hostile METADATA v1 answers over a real socket ---------------------------------


class OneAnswer:
    """A listener that answers every request with ``body`` (after the request's
    correlation id), as a hostile peer pretending to be a broker."""

    def __init__(self, body: bytes):
        self.body = body
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.uri = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    head = conn.recv(4)
                    (size,) = struct.unpack(">i", head)
                    request = b""
                    while len(request) < size:
                        request += conn.recv(size - len(request))
                    correlation = request[4:8]
                    frame = correlation + self.body
                    conn.sendall(struct.pack(">i", len(frame)) + frame)
                    time.sleep(0.2)
                except OSError:
                    continue

    def close(self):
        self.sock.close()


def metadata_v1_body(partitions: list[tuple[int, int, list[int]]]) -> bytes:
    """broker 1 (this peer) answers topic "t" with ``(partition, leader, replicas)``s."""
    w = Writer()
    w.int32(1)
    w.int32(1)
    w.int32(1)  # one broker
    w.int32(1)
    w.string("127.0.0.1")
    w.int32(9)
    w.string(None)
    w.int32(1)  # one topic
    w.string("t")
    w.int16(0)
    w.int32(len(partitions))
    for p, leader, replicas in partitions:
        w.int32(p)
        w.int16(0)
        w.int32(leader)
        w.int32(3)
        w.int32(len(replicas))
        for r in replicas:
            w.int32(r)
        w.int32(len(replicas))
        for r in replicas:
            w.int32(r)
        w.int64(0)
        w.int64(0)
        w.string(None)
    return w.getvalue()


def ask_with(client: SimpleClient):
    return lambda uri, topics: client.metadata_v1(topics)


def test_a_replica_list_past_the_bound_is_a_refused_answer():
    peer = OneAnswer(metadata_v1_body([(0, 1, list(range(1, 100)))]))
    try:
        with SimpleClient(peer.uri, timeout=2.0) as client:
            with pytest.raises(ProtocolError):
                client.metadata_v1(["t"])
            leaders = LeaderMap(MetadataLeaders([peer.uri], ask_with(client)), max_retries=0)
            with pytest.raises(ProtocolError):
                leaders.leader("t", 0)
    finally:
        peer.close()


def test_a_partition_number_of_a_billion_costs_nothing():
    peer = OneAnswer(metadata_v1_body([(0, 1, [1, 2]), (1_000_000_000, 1, [1, 2])]))
    try:
        with SimpleClient(peer.uri, timeout=2.0) as client:
            leaders = LeaderMap(MetadataLeaders([peer.uri], ask_with(client)), max_retries=0)
            found = leaders.get("t")
            assert len(found.partitions) == 1
            assert leaders.leader("t", 0) == (1, peer.uri)
    finally:
        peer.close()


def test_a_peer_that_is_not_a_broker_is_one_failed_source():
    peer = OneAnswer(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        with SimpleClient(peer.uri, timeout=2.0) as client:
            leaders = LeaderMap(MetadataLeaders([peer.uri], ask_with(client)), max_retries=0)
            with pytest.raises((ProtocolError, OSError)):
                leaders.get("t")
    finally:
        peer.close()


def test_api_has_the_metadata_layout_this_file_writes():
    # the hand-written answers above follow METADATA v1 as the codec reads it
    from hostbroker.protocol import replication as rp

    frame = struct.pack(">i", 5) + metadata_v1_body([(0, 1, [1, 2])])
    _, body = rp.decode_response(frame, rp.MetadataResponseV1)
    assert body.topics[0].partitions[0].replicas == (1, 2)
    assert api.ApiKey.METADATA == 3
