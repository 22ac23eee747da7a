"""Replication's requests at a real standalone broker (docs/spec/protocol.md,
"Replication"; docs/architecture.md, "Replication in handlers and
processors"): METADATA v1 and FETCH v1 of unreplicated topics, answered by
the handler (processors answer only version 0), and a follower's requests
for a partition this broker does not lead refused.

One broker serves the module; every test uses topics of its own, over TCP
and the Unix socket.
"""

from __future__ import annotations

import itertools
import threading
import time

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker, TopicConfigEntry
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    RawSocket,
    created_topic,
    module_broker,
    new_topic,
    produce_request,
    uri,
    wait_for,
)

served = module_broker(num_partitions=1, broker_id=7)


def ask(uri_: str, body, cls, correlation_id: int = 11):
    with RawSocket(uri_) as sock:
        sock.send(rproto.encode_request(body, correlation_id, "test"))
        corr, answer = rproto.decode_response(sock.read_frame(), cls)
    assert corr == correlation_id
    return answer


def produced(uri_: str, topic: str, payloads: list[bytes]) -> int:
    with SimpleClient(uri_) as client:
        client.produce(topic, 0, encode_message_set(payloads))
        return client.offsets(topic, 0, -1)[0]


def test_metadata_v1_of_an_unreplicated_topic_names_this_broker_alone(uri, served):
    topic = created_topic(uri, partitions=2)
    end = produced(uri, topic, [b"a" * 10, b"b" * 20])
    answer = ask(uri, rproto.MetadataRequestV1((topic, "no-such-topic")),
                 rproto.MetadataResponseV1)
    assert answer.broker_id == 7
    assert answer.controller_id == -1  # no controller has spoken to it
    assert [b.broker_id for b in answer.brokers] == [7]
    known, unknown = answer.topics
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert known.error_code == ErrorCode.NONE
    first = known.partitions[0]
    assert (first.partition, first.error_code, first.leader, first.leader_epoch) == (0, 0, 7, -1)
    assert (tuple(first.replicas), tuple(first.isr)) == ((7,), (7,))
    assert (first.log_start_offset, first.high_watermark) == (0, end)
    assert [p.partition for p in known.partitions] == [0, 1]


def test_fetch_v1_of_a_consumer_reads_an_unreplicated_log_as_v0_does(uri, served):
    topic = created_topic(uri)
    data = encode_message_set([b"x" * 30, b"y" * 40])
    with SimpleClient(uri) as client:
        client.produce(topic, 0, data)
    answer = ask(uri, rproto.FetchRequestV1(-1, 0, 1, (
        rproto.FetchPartitionV1(topic, 0, -1, 0, 1 << 20),)), rproto.FetchResponseV1)
    [part] = answer.partitions
    assert part.error_code == ErrorCode.NONE
    assert (part.high_watermark, part.log_end_offset, part.data_epoch) == (
        len(data), len(data), -1)
    assert bytes(part.message_set) == data


def test_a_follower_fetch_of_a_partition_this_broker_does_not_lead_is_refused(uri, served):
    topic = created_topic(uri)
    produced(uri, topic, [b"z" * 10])
    answer = ask(uri, rproto.FetchRequestV1(3, 0, 1, (
        rproto.FetchPartitionV1(topic, 0, -1, 0, 1 << 20),
        rproto.FetchPartitionV1("no-such-topic", 0, -1, 0, 1 << 20))), rproto.FetchResponseV1)
    plain, missing = answer.partitions
    assert plain.error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert len(plain.message_set) == 0
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    epochs = ask(uri, rproto.OffsetForLeaderEpochRequest(3, (
        rproto.OffsetForLeaderEpochPartition(topic, 0, 0),)), rproto.OffsetForLeaderEpochResponse)
    [result] = epochs.partitions
    assert (result.error_code, result.leader_epoch, result.end_offset) == (
        ErrorCode.NOT_LEADER_FOR_PARTITION, -1, -1)


def test_v0_metadata_and_fetch_still_answer_as_before(uri, served):
    topic = created_topic(uri)
    end = produced(uri, topic, [b"q" * 10])
    with SimpleClient(uri) as client:
        meta = client.metadata([topic])
        [part] = meta.topics[0].partitions
        assert (part.broker_id, part.log_end_offset) == (7, end)
        assert client.fetch(topic, 0, 0, 1 << 20).log_end_offset == end


# A replicated partition driven by hand: this broker (7) and a replica (8)
# that is this test's client.


_controller_epochs = itertools.count(1)


def leader_and_isr(uri_: str, topic: str, leader: int, leader_epoch: int, isr=(7, 8),
                   replicas=(7, 8), configs=None, epoch: int | None = None
                   ) -> rproto.LeaderAndIsrResponse:
    """A LEADER_AND_ISR of controller 99 (in a new controller epoch unless ``epoch``)."""
    epoch = next(_controller_epochs) if epoch is None else epoch
    topic_configs = (rproto.TopicConfigs(topic, tuple(
        TopicConfigEntry(k, v) for k, v in (configs or {}).items())),) if configs else ()
    answer = ask(uri_, rproto.LeaderAndIsrRequest(99, epoch, (rproto.LeaderAndIsrPartition(
        topic, 0, leader, leader_epoch, tuple(isr), 0, tuple(replicas)),), topic_configs, (
        MetadataBroker(8, "127.0.0.1", 1, None),)), rproto.LeaderAndIsrResponse)
    return answer


def replica_fetch(uri_: str, topic: str, offset: int, leader_epoch: int = 1, replica: int = 8,
                  max_wait_ms: int = 0):
    answer = ask(uri_, rproto.FetchRequestV1(replica, max_wait_ms, 1, (
        rproto.FetchPartitionV1(topic, 0, leader_epoch, offset, 1 << 20),)),
        rproto.FetchResponseV1)
    return answer.partitions[0]


def partition_v1(uri_: str, topic: str):
    meta = ask(uri_, rproto.MetadataRequestV1((topic,)), rproto.MetadataResponseV1)
    return meta, meta.topics[0].partitions[0]


def test_a_leader_serves_consumers_below_the_watermark_its_follower_moves(uri, served):
    topic = new_topic("led")
    answer = leader_and_isr(uri, topic, leader=7, leader_epoch=1)
    assert answer.error_code == ErrorCode.NONE
    assert [(p.topic, p.error_code) for p in answer.partitions] == [(topic, ErrorCode.NONE)]
    meta, part = partition_v1(uri, topic)
    assert (part.leader, part.leader_epoch, tuple(part.replicas), tuple(part.isr)) == (
        7, 1, (7, 8), (7, 8))
    assert part.high_watermark == 0 and meta.controller_id == 99
    assert 8 in [b.broker_id for b in meta.brokers]
    data = encode_message_set([b"r" * 25, b"s" * 35])
    with SimpleClient(uri) as client:
        client.produce(topic, 0, data)
        # the follower has nothing yet: consumers see nothing
        fetched = client.fetch(topic, 0, 0, 1 << 20)
        assert (fetched.log_end_offset, len(fetched.message_set)) == (0, 0)
        assert client.offsets(topic, 0, -1)[0] == 0
    got = replica_fetch(uri, topic, 0)
    assert (got.error_code, got.high_watermark, got.log_end_offset, got.data_epoch) == (
        ErrorCode.NONE, 0, len(data), 1)
    assert bytes(got.message_set) == data
    # a follower fetch that names no leader epoch reads, but moves no watermark
    assert replica_fetch(uri, topic, len(data), leader_epoch=-1).error_code == ErrorCode.NONE
    time.sleep(0.3)  # (its position would be at the writer by now)
    assert partition_v1(uri, topic)[1].high_watermark == 0
    replica_fetch(uri, topic, len(data))  # the follower has it all: the watermark moves
    with SimpleClient(uri) as client:
        wait_for(lambda: client.fetch(topic, 0, 0, 1 << 20).log_end_offset == len(data))
        assert bytes(client.fetch(topic, 0, 0, 1 << 20).message_set) == data
        assert client.offsets(topic, 0, -1)[0] == len(data)
    latest = (ErrorCode.NONE, 1, len(data))
    for asked, expected in ((1, latest), (5, latest), (0, (ErrorCode.NONE, -1, -1))):
        epochs = ask(uri, rproto.OffsetForLeaderEpochRequest(8, (
            rproto.OffsetForLeaderEpochPartition(topic, 0, asked),)),
            rproto.OffsetForLeaderEpochResponse)
        [r] = epochs.partitions
        assert (r.error_code, r.leader_epoch, r.end_offset) == expected
    assert replica_fetch(uri, topic, 0, leader_epoch=0).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert replica_fetch(uri, topic, 0, leader_epoch=2).error_code == (
        ErrorCode.NOT_LEADER_FOR_PARTITION)
    # a broker that is no replica of it, and this broker itself, move nothing
    for stranger in (5, 7):
        assert replica_fetch(uri, topic, 0, replica=stranger).error_code == (
            ErrorCode.REPLICA_NOT_AVAILABLE)


def test_acks_all_waits_for_the_follower_and_min_insync_refuses(uri, served):
    topic = new_topic("acks")
    leader_and_isr(uri, topic, leader=7, leader_epoch=1)
    data = encode_message_set([b"w" * 20])
    result = {}

    def produce() -> None:
        with SimpleClient(uri) as client:
            # (a long timeout: on a loaded machine the steps below may take seconds)
            result["answer"] = client.request(produce_request(topic, 0, data, acks=-1,
                                                              timeout_ms=60000))

    thread = threading.Thread(target=produce)
    thread.start()
    assert wait_for(lambda: replica_fetch(uri, topic, 0).log_end_offset == len(data), 30)
    assert "answer" not in result  # held until the follower has it
    replica_fetch(uri, topic, len(data))
    thread.join(60)
    [part] = result["answer"].partitions
    assert (part.error_code, part.base_offset) == (ErrorCode.NONE, 0)
    strict = new_topic("strict")
    leader_and_isr(uri, strict, leader=7, leader_epoch=1, isr=(7,),
                   configs={"min.insync.replicas": "2"})
    with SimpleClient(uri) as client:
        [part] = client.request(produce_request(strict, 0, data, acks=-1)).partitions
        assert part.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        [part] = client.request(produce_request(strict, 0, data, acks=1)).partitions
        assert part.error_code == ErrorCode.NONE


def test_a_follower_refuses_producers_and_consumers_and_names_its_leader(uri, served):
    topic = new_topic("follow")
    leader_and_isr(uri, topic, leader=7, leader_epoch=1)
    answer = leader_and_isr(uri, topic, leader=8, leader_epoch=2)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]
    data = encode_message_set([b"f" * 20])
    with SimpleClient(uri) as client:
        [part] = client.request(produce_request(topic, 0, data, acks=1)).partitions
        assert part.error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
        [part] = client.request(produce_request(topic, 0, data, acks=-1)).partitions
        assert part.error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
        fetched = client.request(api.FetchRequest(0, 1, (api.FetchPartition(topic, 0, 0, 100),)))
        assert fetched.partitions[0].error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
        [meta] = client.metadata([topic]).topics
        assert meta.partitions[0].broker_id == 8
    assert replica_fetch(uri, topic, 0, leader_epoch=2).error_code == (
        ErrorCode.NOT_LEADER_FOR_PARTITION)
    stale = leader_and_isr(uri, topic, leader=7, leader_epoch=3, epoch=1)
    assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    stopped = ask(uri, rproto.StopReplicaRequest(99, next(_controller_epochs), 1, (
        rproto.StopReplicaPartition(topic, 0),)), rproto.StopReplicaResponse)
    assert [p.error_code for p in stopped.partitions] == [ErrorCode.NONE]
    wait_for(lambda: ask(uri, rproto.MetadataRequestV1((topic,)), rproto.MetadataResponseV1)
             .topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_a_follower_fetch_waits_for_data_and_old_epochs_end_where_they_ended(uri, served):
    topic = new_topic("poll")
    leader_and_isr(uri, topic, leader=7, leader_epoch=1)
    first = encode_message_set([b"1" * 30])
    with SimpleClient(uri) as client:
        client.produce(topic, 0, first)
    got = {}

    def fetch() -> None:
        got["part"] = replica_fetch(uri, topic, len(first), max_wait_ms=5000)

    thread = threading.Thread(target=fetch)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive(), got  # parked: nothing past its offset yet
    second = encode_message_set([b"2" * 40])
    with SimpleClient(uri) as client:
        client.produce(topic, 0, second)
    thread.join(10)
    assert bytes(got["part"].message_set) == second and got["part"].data_epoch == 1
    # a new leadership (epoch 3) starts at the log end: a fetch in epoch 1's
    # range stops where epoch 1 ended
    end = len(first) + len(second)
    leader_and_isr(uri, topic, leader=7, leader_epoch=3)
    third = encode_message_set([b"3" * 50])
    with SimpleClient(uri) as client:
        client.produce(topic, 0, third)
    old = replica_fetch(uri, topic, 0, leader_epoch=3)
    assert (old.data_epoch, bytes(old.message_set)) == (1, first + second)
    new = replica_fetch(uri, topic, end, leader_epoch=3)
    assert (new.data_epoch, bytes(new.message_set), new.log_end_offset) == (
        3, third, end + len(third))


def test_v0_metadata_read_in_bulk_names_the_leader_too(uri, served):
    topic = new_topic("bulk")
    leader_and_isr(uri, topic, leader=8, leader_epoch=1)
    with SimpleClient(uri) as client:
        meta = client.metadata([topic] * 20)  # enough names to read the table in bulk
        assert {t.partitions[0].broker_id for t in meta.topics} == {8}


def test_a_consumer_long_poll_is_answered_when_the_watermark_covers_the_data(uri, served):
    topic = new_topic("hwpoll")
    leader_and_isr(uri, topic, leader=7, leader_epoch=1)
    data = encode_message_set([b"h" * 33])
    got = {}

    def poll() -> None:
        with SimpleClient(uri) as client:
            got["v0"] = client.request(api.FetchRequest(5000, 1, (
                api.FetchPartition(topic, 0, 0, 1 << 20),))).partitions[0]

    def poll_v1() -> None:
        got["v1"] = ask(uri, rproto.FetchRequestV1(-1, 5000, 1, (
            rproto.FetchPartitionV1(topic, 0, 1, 0, 1 << 20),)), rproto.FetchResponseV1,
            correlation_id=12).partitions[0]

    threads = [threading.Thread(target=poll), threading.Thread(target=poll_v1)]
    for thread in threads:
        thread.start()
    with SimpleClient(uri) as client:
        client.produce(topic, 0, data)
    for thread in threads:
        thread.join(0.5)
    assert got == {}  # appended, but not below the watermark yet
    replica_fetch(uri, topic, len(data))
    for thread in threads:
        thread.join(10)
    assert (got["v0"].log_end_offset, bytes(got["v0"].message_set)) == (len(data), data)
    assert (got["v1"].high_watermark, bytes(got["v1"].message_set)) == (len(data), data)
