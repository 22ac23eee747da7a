"""The debugging consumer's FETCH v1 (``replica_id`` -2, docs/spec/protocol.md):
served by any replica from its own log, but never above that replica's view of the
high watermark, and moving nothing; every other negative replica id is malformed
(an error frame, the connection closed), and a plain consumer's fetch from a
follower stays NOT_LEADER_FOR_PARTITION. The ``session`` fixture checks workers,
memory, a normal client and the witness data after each test.
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from tests.hostile import fuzzlib
from tests.integration.wire_helpers import RawSocket, new_topic

# The session broker is shared by the package and keeps the highest controller epoch
# it took; this module never raises it past what another module already sent, so it
# takes the highest one the broker holds.
ME = 0  # the session broker's broker.id


def ask(session, body, cls):
    with RawSocket(session.uris[0]) as sock:
        sock.send(rproto.encode_request(body, 7, "hostile-debug"))
        corr, answer = rproto.decode_response(sock.read_frame(), cls)
    assert corr == 7
    return answer


def current_epoch(session) -> int:
    """The broker's controller epoch, in one request: epoch 0 is refused
    STALE_CONTROLLER_EPOCH with the highest epoch seen in the answer's last
    partition, of topic "" (docs/spec/protocol.md), unless 0 is that epoch."""
    answer = ask(session, rproto.LeaderAndIsrRequest(99, 0, (), (), ()),
                 rproto.LeaderAndIsrResponse)
    if answer.error_code == ErrorCode.NONE:
        return 0
    assert answer.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    [(topic, epoch, _)] = [(p.topic, p.partition, p.error_code) for p in answer.partitions]
    assert topic == "" and epoch > 0
    return epoch


def become(session, topic: str, leader: int, epoch: int = 1) -> None:
    part = rproto.LeaderAndIsrPartition(topic, 0, leader, epoch, (ME, 99), 0, (ME, 99))
    answer = ask(session, rproto.LeaderAndIsrRequest(99, current_epoch(session), (part,), (),
                                                     ()), rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]


def fetch(session, replica_id: int, topic: str, offset: int = 0):
    answer = ask(session, rproto.FetchRequestV1(replica_id, 0, 1, (
        rproto.FetchPartitionV1(topic, 0, -1, offset, 1 << 20),)), rproto.FetchResponseV1)
    [part] = answer.partitions
    return part


def test_a_debugging_fetch_never_reads_above_the_replicas_high_watermark(session):
    """The leader holds bytes its absent follower (99) never fetched: its high
    watermark stays 0, so a debugging fetch, at 0 or anywhere up to the log end,
    gets nothing; and it does not move the watermark either."""
    topic = new_topic("debug")
    become(session, topic, leader=ME)
    data = encode_message_set([b"unreplicated" * 4])
    with session.broker.client() as client:
        client.produce(topic, 0, data)
    for offset in (0, len(data) // 2, len(data)):
        part = fetch(session, rproto.DEBUG_REPLICA_ID, topic, offset)
        assert (part.error_code, part.high_watermark, bytes(part.message_set)) == (
            ErrorCode.NONE, 0, b""), offset
    part = fetch(session, rproto.DEBUG_REPLICA_ID, topic, len(data) + 1)
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    with session.broker.client() as client:
        fetched = client.fetch(topic, 0, 0, 1 << 20)
        assert (fetched.log_end_offset, len(fetched.message_set)) == (0, 0)


def test_a_follower_serves_only_the_debugging_consumer(session):
    topic = new_topic("debugf")
    become(session, topic, leader=99)
    assert fetch(session, rproto.CONSUMER_REPLICA_ID, topic).error_code == \
        ErrorCode.NOT_LEADER_FOR_PARTITION
    part = fetch(session, rproto.DEBUG_REPLICA_ID, topic)
    assert (part.error_code, part.high_watermark, bytes(part.message_set)) == (
        ErrorCode.NONE, 0, b"")
    # a follower of 99 is no leader for a follower's fetch either
    assert fetch(session, 98, topic).error_code == ErrorCode.NOT_LEADER_FOR_PARTITION


def test_other_negative_replica_ids_are_malformed(session):
    topic = new_topic("debugn")
    become(session, topic, leader=ME)
    for replica_id in (-3, -100, -(2**31)):
        frame = api.encode_request(rproto.FetchRequestV1(replica_id, 0, 1, (
            rproto.FetchPartitionV1(topic, 0, -1, 0, 10),)), 9, "hostile")
        outcome = fuzzlib.exchange(session.uris[0], [frame])
        assert (outcome.error_frames, outcome.closed_early) == (1, True), replica_id
    # -2 is the FETCH's only: OFFSET_FOR_LEADER_EPOCH from it is malformed
    frame = api.encode_request(rproto.OffsetForLeaderEpochRequest(-2, (
        rproto.OffsetForLeaderEpochPartition(topic, 0, 1),)), 9, "hostile")
    outcome = fuzzlib.exchange(session.uris[0], [frame])
    assert (outcome.error_frames, outcome.closed_early) == (1, True)
