"""Replication's requests at a real standalone broker (docs/spec/protocol.md,
"Replication"; docs/architecture.md, "Replication in handlers and
processors"): METADATA v1 and FETCH v1 of unreplicated topics, answered by
the handler (processors answer only version 0), and a follower's requests
for a partition this broker does not lead refused.

One broker serves the module; every test uses topics of its own, over TCP
and the Unix socket.
"""

from __future__ import annotations

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import replication as rproto
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    RawSocket,
    created_topic,
    module_broker,
    uri,
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
