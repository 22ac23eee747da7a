"""Holes a review of replication found, closed: each case here failed before
its fix. A broker of its own (standalone: replicated partitions are made by
LEADER_AND_ISR from a client, as a controller would send it), so the
controller epochs raised here do not touch the package's fuzz session.

- an empty PRODUCE to a replica that does not lead is refused
  NOT_LEADER_FOR_PARTITION as a non-empty one is (it was answered NONE with
  the follower's log end), on the handler's way and on a processor's lone PUT.
- an ISR commit the registrar left for a partition is not adopted by a new
  partition claimed into the same slot, even by a writer replaced later
  (which adopts whatever commit its predecessor left): the claim clears it.
  The test stands in for the registrar (no ZooKeeper here): it writes the
  commit as the registrar would.
"""

from __future__ import annotations

import itertools
import os
import signal
import time

import pytest

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from hostbroker.shm import partitions as ptable
from hostbroker.workers.plan import BrokerPlan
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, new_topic, produce_request, stop_or_kill

ME = 0  # the broker's broker.id
_epochs = itertools.count(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("review")).start()
    yield b
    stop_or_kill(b)


def ask(broker, body, cls, correlation_id: int = 5):
    with RawSocket(broker.tcp) as sock:
        sock.send(rproto.encode_request(body, correlation_id, "hostile"))
        corr, answer = rproto.decode_response(sock.read_frame(), cls)
    assert corr == correlation_id
    return answer


def follower_of_99(broker) -> str:
    """A new replicated topic whose partition 0 this broker follows (leader 99)."""
    topic = new_topic("follow")
    answer = ask(broker, rproto.LeaderAndIsrRequest(99, next(_epochs), (
        rproto.LeaderAndIsrPartition(topic, 0, 99, 1, (99, ME), 0, (99, ME)),), (), ()),
        rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]
    return topic


@pytest.mark.parametrize("acks", [1, -1])
def test_an_empty_produce_to_a_follower_is_not_led(broker, acks):
    topic = follower_of_99(broker)
    for data in (b"", encode_message_set([b"x"])):
        with RawSocket(broker.tcp) as sock:
            # acks=1 alone on its connection: a lone PUT; acks=-1: the handler's way
            sock.send(api.encode_request(produce_request(topic, 0, data, acks=acks), 7))
            corr, answer = sock.read_response(api.ApiKey.PRODUCE)
            assert corr == 7
            assert [(p.error_code, p.base_offset) for p in answer.partitions] == [
                (ErrorCode.NOT_LEADER_FOR_PARTITION, -1)], (data, acks)


def replica(topic: str, leader: int, epoch: int = 1, isr=(ME, 99)):
    return rproto.LeaderAndIsrPartition(topic, 0, leader, epoch, tuple(isr), 0, (ME, 99))


def lead(broker, topic: str) -> None:
    answer = ask(broker, rproto.LeaderAndIsrRequest(99, next(_epochs), (replica(topic, ME),),
                                                    (), ()), rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]


def isr_of(broker, topic: str) -> tuple[int, ...]:
    meta = ask(broker, rproto.MetadataRequestV1((topic,)), rproto.MetadataResponseV1)
    [p] = meta.topics[0].partitions
    return tuple(p.isr)


def slot_of(table, topic: str) -> int | None:
    return next((i for i, s in table.scan() if s.name == topic), None)


def test_an_isr_commit_does_not_outlive_its_partition_in_the_slot(broker):
    plan = BrokerPlan.from_config(
        Config.build(overrides=[f"log.dirs={broker.settings['log.dirs']}"]))
    table = ptable.PartitionTable.attach(plan.table_name)
    commits = ptable.IsrCommitTable.attach(plan.isr_commits_name)
    old = new_topic("old")
    lead(broker, old)
    slot = slot_of(table, old)
    # the registrar's commit for the old partition: ZooKeeper's state node at
    # version 5 holds this broker alone (bit 0: replica r0 = ME) in epoch 1
    commits.commit(slot, 5, 0b01, 1)
    stopped = ask(broker, rproto.StopReplicaRequest(99, next(_epochs), 1, (
        rproto.StopReplicaPartition(old, 0),)), rproto.StopReplicaResponse)
    assert [p.error_code for p in stopped.partitions] == [ErrorCode.NONE]
    deadline = time.monotonic() + 10
    while slot_of(table, old) is not None:
        assert time.monotonic() < deadline, "the old partition's slot was not freed"
        time.sleep(0.05)
    new = new_topic("new")
    lead(broker, new)
    assert slot_of(table, new) == slot  # the first free slot: the old one's
    assert isr_of(broker, new) == (ME, 99)
    writer = broker.workers()["hb-writer-0"]
    os.kill(writer, signal.SIGKILL)
    broker.wait_worker_replaced("hb-writer-0", writer)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # the replaced writer has had its rounds
        assert isr_of(broker, new) == (ME, 99), "the old partition's ISR commit was adopted"
        time.sleep(0.1)
