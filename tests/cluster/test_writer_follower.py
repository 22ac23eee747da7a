"""A follower's writer appends what its ``hb-replica`` fetched from the
leader, byte for byte at the same offsets, and the leader's writer answers
acks=-1 and moves its high watermark as the follower's fetches come
(docs/storage.md, "Replicas").

Two real brokers: the leader (7) standalone, the follower (8) in cluster
mode, whose ``hb-replica`` does the fetching; both are told their roles by
LEADER_AND_ISR sent by hand, as a controller would (the one ZooKeeper names
to the follower: broker 99 in epoch 1). A real ZooKeeper, one for the module."""

from __future__ import annotations

import os
import threading

import psutil
import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker
from tests.cluster.controller_by_hand import be_the_controller
from tests.cluster.zkserver import ZooKeeperServer
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, produce_request, stop_or_kill, wait_for

LEAN = {"num.processors": 1, "num.handlers": 1}
TOPIC = "mirrored"
SEGMENT = "00000000000000000000.kafka"


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    try:
        with be_the_controller(server.connect, 99):  # the one the follower takes requests from
            yield server
    finally:
        server.stop()


@pytest.fixture
def pair(tmp_path, zookeeper):
    leader = Broker(tmp_path / "leader", **LEAN, **{"broker.id": 7})
    follower = Broker(tmp_path / "follower", **LEAN, **{
        "broker.id": 8, "zookeeper.connect": zookeeper.connect,
        "replica.fetch.wait.max.ms": 100})
    os.makedirs(leader.root, exist_ok=True)
    os.makedirs(follower.root, exist_ok=True)
    leader.start()
    follower.start()
    yield leader, follower
    stop_or_kill(follower)
    stop_or_kill(leader)


def tell(broker: Broker, leader: Broker, leader_epoch: int, isr=(7, 8), controller_epoch=1):
    """A controller's LEADER_AND_ISR: broker 7 leads TOPIC-0, 8 follows."""
    request = rproto.LeaderAndIsrRequest(99, controller_epoch, (rproto.LeaderAndIsrPartition(
        TOPIC, 0, 7, leader_epoch, tuple(isr), 0, (7, 8)),), (), (
        MetadataBroker(7, "127.0.0.1", leader.port, leader.unix_path),))
    with RawSocket(broker.unix) as sock:
        sock.send(rproto.encode_request(request, 5, "controller"))
        _, answer = rproto.decode_response(sock.read_frame(), rproto.LeaderAndIsrResponse)
    assert answer.error_code == ErrorCode.NONE
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]


def segment(broker: Broker) -> bytes:
    path = os.path.join(broker.settings["log.dirs"].split(",")[0], f"{TOPIC}_0", SEGMENT)
    with open(path, "rb") as f:
        return f.read()


def produce_all(broker: Broker, data: bytes, timeout_ms: int = 15000):
    with SimpleClient(broker.unix) as client:
        [part] = client.request(produce_request(TOPIC, 0, data, acks=-1,
                                                timeout_ms=timeout_ms)).partitions
    return part


def test_the_follower_holds_the_leaders_bytes_and_acks_all_waits_for_it(pair):
    leader, follower = pair
    tell(leader, leader, 1)
    tell(follower, leader, 1)
    batches = [encode_message_set([b"%d-%d" % (i, j) * (1 + j % 7) for j in range(20)])
               for i in range(5)]
    end = 0
    for data in batches:
        part = produce_all(leader, data)
        assert (part.error_code, part.base_offset) == (ErrorCode.NONE, end)
        end += len(data)
    # acknowledged with acks=-1: the follower's writer had every byte, at the same offsets
    assert segment(follower)[:end] == segment(leader) == b"".join(batches)
    wait_for(lambda: len(segment(follower)) == end)
    with SimpleClient(leader.unix) as client:
        assert client.fetch(TOPIC, 0, 0, 1 << 20).log_end_offset == end  # the HW
    with SimpleClient(follower.unix) as client:  # the follower takes no produce
        [part] = client.request(produce_request(TOPIC, 0, batches[0], acks=1)).partitions
        assert part.error_code == ErrorCode.NOT_LEADER_FOR_PARTITION


def test_a_stopped_follower_holds_acks_all_until_it_is_back(pair):
    leader, follower = pair
    tell(leader, leader, 1)
    tell(follower, leader, 1)
    first = encode_message_set([b"first"])
    assert produce_all(leader, first).error_code == ErrorCode.NONE
    # the whole follower broker freezes (SIGSTOP to every process of it)
    frozen = [psutil.Process(follower.proc.pid),
              *psutil.Process(follower.proc.pid).children(recursive=True)]
    for p in frozen:
        p.suspend()
    result = {}
    second = encode_message_set([b"second"])
    thread = threading.Thread(target=lambda: result.update(part=produce_all(leader, second)))
    thread.start()
    thread.join(1.5)
    assert "part" not in result  # the follower in the ISR has not fetched it
    for p in frozen:
        p.resume()
    thread.join(20)
    assert result["part"].error_code == ErrorCode.NONE
    wait_for(lambda: segment(follower) == first + second)
