"""A writer that dies is replaced with its replicas as they were: role,
leader epoch, ISR and high watermark come back from the partition table and
the files, so consumers read up to the same point, the follower's fetches
move the watermark on, and acks=-1 is held for the follower as before
(docs/storage.md, "Replicas").

A real standalone broker (7) leads a replicated partition it was told of by
hand; this test's client is the follower (8), fetching with FETCH v1."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, produce_request, stop_or_kill, wait_for


def ask(uri: str, body, cls):
    with RawSocket(uri) as sock:
        sock.send(rproto.encode_request(body, 11, "test"))
        _, answer = rproto.decode_response(sock.read_frame(), cls)
    return answer


def leader_and_isr(uri: str, topic: str, leader_epoch: int):
    """A controller's LEADER_AND_ISR: this broker (7) leads, 8 follows, both in the ISR."""
    return ask(uri, rproto.LeaderAndIsrRequest(99, 1, (rproto.LeaderAndIsrPartition(
        topic, 0, 7, leader_epoch, (7, 8), 0, (7, 8)),), (), (
        MetadataBroker(8, "127.0.0.1", 1, None),)), rproto.LeaderAndIsrResponse)


def replica_fetch(uri: str, topic: str, offset: int, leader_epoch: int):
    """Follower 8's FETCH v1 of ``topic``-0 at ``offset``."""
    answer = ask(uri, rproto.FetchRequestV1(8, 0, 1, (
        rproto.FetchPartitionV1(topic, 0, leader_epoch, offset, 1 << 20),)),
        rproto.FetchResponseV1)
    return answer.partitions[0]


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path, **{"broker.id": 7, "num.processors": 1, "num.handlers": 1})
    b.start()
    yield b
    stop_or_kill(b)


def test_a_replaced_writer_keeps_its_leader_role_and_watermark(broker):
    uri, topic = broker.unix, "kept"
    assert leader_and_isr(uri, topic, leader_epoch=3).error_code == ErrorCode.NONE
    first = encode_message_set([b"a" * 30, b"b" * 40])
    with SimpleClient(uri) as client:
        client.produce(topic, 0, first)
    replica_fetch(uri, topic, len(first), leader_epoch=3)  # the follower has it: HW moves
    with SimpleClient(uri) as client:
        wait_for(lambda: client.fetch(topic, 0, 0, 1 << 20).log_end_offset == len(first))
        client.produce(topic, 0, encode_message_set([b"unreplicated"]))  # past the HW

    victim = broker.workers()["hb-writer-0"]
    os.kill(victim, signal.SIGKILL)
    broker.wait_worker_replaced("hb-writer-0", victim, timeout=20)

    with SimpleClient(uri) as client:
        fetched = client.fetch(topic, 0, 0, 1 << 20)
        assert (fetched.log_end_offset, bytes(fetched.message_set)) == (len(first), first)
    # still the leader, in epoch 3: the follower's fetch is served and held to account
    got = replica_fetch(uri, topic, len(first), leader_epoch=3)
    assert (got.error_code, got.high_watermark) == (ErrorCode.NONE, len(first))
    end = got.log_end_offset
    result = {}

    def produce() -> None:
        with SimpleClient(uri) as client:
            result["answer"] = client.request(produce_request(
                topic, 0, encode_message_set([b"after"]), acks=-1, timeout_ms=15000))

    thread = threading.Thread(target=produce)
    thread.start()
    wait_for(lambda: replica_fetch(uri, topic, end, leader_epoch=3).log_end_offset > end)
    assert "answer" not in result  # held for the follower, as before the crash
    new_end = replica_fetch(uri, topic, end, leader_epoch=3).log_end_offset
    replica_fetch(uri, topic, new_end, leader_epoch=3)
    thread.join(20)
    [part] = result["answer"].partitions
    assert (part.error_code, part.base_offset) == (ErrorCode.NONE, end)
    with SimpleClient(uri) as client:
        wait_for(lambda: client.fetch(topic, 0, 0, 1 << 20).log_end_offset == new_end)
