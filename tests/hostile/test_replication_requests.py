"""Replication's requests from a client that is no controller and no
follower (docs/architecture.md, "Replication in handlers and processors"):
until access control (issue 38) a standalone broker (as here) refuses a
LEADER_AND_ISR or STOP_REPLICA only by its controller epoch (in cluster mode
also by what ZooKeeper says: test_controller_fence.py), so what any client
may send must not take
over, stop or delete an unreplicated topic, move a watermark it is no
replica of, or make the broker create what its limits forbid. Malformed
ones get an error frame and the close. The ``session`` fixture checks
workers, memory, a normal client and the witness data after each test.
"""

from __future__ import annotations

import itertools
import os

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.log.segments import partition_dirname
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker, TopicConfigEntry
from tests.hostile import fuzzlib
from tests.integration.wire_helpers import RawSocket, new_topic

# the session's broker is shared by the package: each test raises the epoch
_epochs = itertools.count(1000, 10)
ME = 0  # the session broker's broker.id


def ask(session, body, cls, correlation_id: int = 5):
    with RawSocket(session.uris[0]) as sock:
        sock.send(rproto.encode_request(body, correlation_id, "hostile"))
        corr, answer = rproto.decode_response(sock.read_frame(), cls)
    assert corr == correlation_id
    return answer


def lai(epoch: int, *partitions, brokers=()) -> rproto.LeaderAndIsrRequest:
    return rproto.LeaderAndIsrRequest(99, epoch, tuple(partitions), (), tuple(brokers))


def part(topic: str, partition: int = 0, leader: int = ME, epoch: int = 1,
         replicas=(ME, 99)) -> rproto.LeaderAndIsrPartition:
    return rproto.LeaderAndIsrPartition(topic, partition, leader, epoch, tuple(replicas), 0,
                                        tuple(replicas))


def plain_topic(session) -> tuple[str, int]:
    topic = new_topic("plain")
    with session.broker.client() as client:
        client.create_topic(topic, 1)
        client.produce(topic, 0, encode_message_set([b"kept" * 5]))
        return topic, client.offsets(topic, 0, api.LATEST_TIME)[0]


def still_plain(session, topic: str, end: int) -> None:
    with session.broker.client() as client:
        assert client.offsets(topic, 0, api.LATEST_TIME)[0] == end
        assert len(client.fetch(topic, 0, 0, 1 << 20).message_set) == end
    meta = ask(session, rproto.MetadataRequestV1((topic,)), rproto.MetadataResponseV1)
    [p] = meta.topics[0].partitions
    assert (p.leader, p.leader_epoch, tuple(p.replicas)) == (ME, -1, (ME,))


def test_a_stale_controller_epoch_changes_nothing(session):
    epoch = next(_epochs)
    first = ask(session, lai(epoch), rproto.LeaderAndIsrResponse)
    assert first.error_code == ErrorCode.NONE
    topic = new_topic("stale")
    stale = ask(session, lai(epoch - 1, part(topic), brokers=[MetadataBroker(98, "h", 1, None)]),
                rproto.LeaderAndIsrResponse)
    assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert [(p.topic, p.error_code) for p in stale.partitions] == [
        (topic, ErrorCode.STALE_CONTROLLER_EPOCH), ("", ErrorCode.STALE_CONTROLLER_EPOCH)]
    assert stale.partitions[-1].partition == epoch  # the highest epoch it has seen
    stopped = ask(session, rproto.StopReplicaRequest(99, epoch - 1, 1, (
        rproto.StopReplicaPartition(topic, 0),)), rproto.StopReplicaResponse)
    assert stopped.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    meta = ask(session, rproto.MetadataRequestV1((topic,)), rproto.MetadataResponseV1)
    assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert 98 not in [b.broker_id for b in meta.brokers]  # its brokers were not stored
    assert meta.controller_id == 99


def test_an_unreplicated_topic_is_not_taken_over_stopped_or_deleted(session):
    topic, end = plain_topic(session)
    taken = ask(session, lai(next(_epochs), part(topic)), rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in taken.partitions] == [ErrorCode.INVALID_REQUEST]
    follow = ask(session, lai(next(_epochs), part(topic, leader=99)), rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in follow.partitions] == [ErrorCode.INVALID_REQUEST]
    for delete in (0, 1):
        stopped = ask(session, rproto.StopReplicaRequest(99, next(_epochs), delete, (
            rproto.StopReplicaPartition(topic, 0),)), rproto.StopReplicaResponse)
        assert [p.error_code for p in stopped.partitions] == [ErrorCode.INVALID_REQUEST]
    still_plain(session, topic, end)


def test_no_client_moves_an_unreplicated_watermark_as_a_follower(session):
    topic, end = plain_topic(session)
    for replica in (ME, 99):
        answer = ask(session, rproto.FetchRequestV1(replica, 0, 1, (
            rproto.FetchPartitionV1(topic, 0, -1, end, 1 << 20),)), rproto.FetchResponseV1)
        assert [p.error_code for p in answer.partitions] == [ErrorCode.NOT_LEADER_FOR_PARTITION]
    still_plain(session, topic, end)


def test_what_the_limits_forbid_is_not_created(session):
    """A partition number past max.partitions.per.topic (64 here), a name no
    topic may have, and a partition this broker is no replica of."""
    topic = new_topic("limits")
    answer = ask(session, lai(next(_epochs), part(topic, partition=64), part("../escape"),
                              part(topic, partition=1, replicas=(97, 98), leader=97)),
                 rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_TOPIC, ErrorCode.NONE]
    meta = ask(session, rproto.MetadataRequestV1((topic, "../escape")), rproto.MetadataResponseV1)
    assert [t.error_code for t in meta.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    log_dir = session.broker.settings["log.dirs"]
    assert not [d for d in os.listdir(log_dir) if d.startswith(topic)]
    assert not os.path.exists(os.path.join(log_dir, partition_dirname("escape", 0)))


def test_malformed_replication_requests_get_an_error_frame(session):
    bad = [
        # the leader is not among the replicas
        lai(next(_epochs), rproto.LeaderAndIsrPartition("t", 0, 5, 1, (ME,), 0, (ME,))),
        # a partition named twice
        lai(next(_epochs), part("t"), part("t")),
        # a negative leader epoch
        lai(next(_epochs), part("t", epoch=-3)),
        # replicas that name a broker twice
        lai(next(_epochs), part("t", replicas=(ME, ME))),
        # a replica id that is neither a broker nor a (debugging) consumer
        rproto.FetchRequestV1(-3, 0, 1, (rproto.FetchPartitionV1("t", 0, -1, 0, 10),)),
        rproto.OffsetForLeaderEpochRequest(ME, (
            rproto.OffsetForLeaderEpochPartition("t", 0, 1),
            rproto.OffsetForLeaderEpochPartition("t", 0, 1))),
        rproto.StopReplicaRequest(99, next(_epochs), 0, (
            rproto.StopReplicaPartition("t", -1),)),
    ]
    for body in bad:
        frame = api.encode_request(body, 9, "hostile")
        outcome = fuzzlib.exchange(session.uris[0], [frame])
        assert (outcome.error_frames, outcome.closed_early) == (1, True), body


def test_only_a_replica_moves_a_replicated_watermark(session):
    topic = new_topic("hw")
    answer = ask(session, lai(next(_epochs), part(topic, replicas=(ME, 99))),
                 rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]
    data = encode_message_set([b"held" * 10])
    with session.broker.client() as client:
        client.produce(topic, 0, data)
    for stranger in (ME, 98, 2**31 - 1):
        fetched = ask(session, rproto.FetchRequestV1(stranger, 0, 1, (
            rproto.FetchPartitionV1(topic, 0, -1, len(data), 1 << 20),)), rproto.FetchResponseV1)
        assert [p.error_code for p in fetched.partitions] == [ErrorCode.REPLICA_NOT_AVAILABLE]
    with session.broker.client() as client:
        fetched = client.fetch(topic, 0, 0, 1 << 20)
        assert (fetched.log_end_offset, len(fetched.message_set)) == (0, 0)
    ask(session, rproto.StopReplicaRequest(99, next(_epochs), 1, (
        rproto.StopReplicaPartition(topic, 0),)), rproto.StopReplicaResponse)


def test_a_bad_topic_config_creates_nothing(session):
    topic = new_topic("cfg")
    request = rproto.LeaderAndIsrRequest(99, next(_epochs), (part(topic),), (rproto.TopicConfigs(
        topic, (TopicConfigEntry("segment.bytes", "lots"),)),), ())
    answer = ask(session, request, rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.INVALID_CONFIG]
    log_dir = session.broker.settings["log.dirs"]
    assert not [d for d in os.listdir(log_dir) if d.startswith(topic)]


def test_a_leader_and_isr_past_request_max_entries_is_refused_before_it_is_decoded(session):
    """Its partitions, topic configs and brokers count against request.max.entries."""
    topic = new_topic("many")
    body = lai(next(_epochs), *(part(topic, partition=p, replicas=(97, 98), leader=97)
                                for p in range(10_001)))
    outcome = fuzzlib.exchange(session.uris[0], [api.encode_request(body, 9, "hostile")])
    assert (outcome.error_frames, outcome.closed_early) == (1, True)
