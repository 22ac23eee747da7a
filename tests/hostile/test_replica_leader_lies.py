"""Hostile leaders, more of them (see test_replica_fetcher.py, whose fake
leader and follower these cases share): a leader that names a cut offset
inside an entry, and one that announces a FETCH answer larger than the
follower may take. The follower is a real broker in cluster mode made a
follower by a LEADER_AND_ISR sent by hand.
"""

from __future__ import annotations

import struct

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker
from tests.hostile.test_replica_fetcher import (EPOCH, FOLLOWER, FakeLeader, fetch_answer,
                                                follower, log_bytes, wait_until)
from tests.integration.wire_helpers import RawSocket, new_topic

__all__ = ["follower"]  # the module's follower broker (a fixture)

_leader_ids = iter(range(1001, 2000))


def follow(broker, topic: str, leader: int, port: int, epoch: int) -> None:
    body = rproto.LeaderAndIsrRequest(99, 1, (rproto.LeaderAndIsrPartition(
        topic, 0, leader, epoch, (leader, FOLLOWER), 0, (leader, FOLLOWER)),), (),
        (MetadataBroker(leader, "127.0.0.1", port, None),))
    with RawSocket(broker.tcp) as sock:
        sock.send(rproto.encode_request(body, 1, "test"))
        _, answer = rproto.decode_response(sock.read_frame(), rproto.LeaderAndIsrResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]


def test_a_cut_inside_an_entry_is_made_at_the_entry_before(follower):
    """The follower holds two entries of epoch 3; its new leader (epoch 4)
    says epoch 3 ends 7 bytes into the second entry. The follower cuts at the
    end of the first (not 7 bytes into the second), then fetches from there."""
    whole = encode_message_set([b"first" * 10, b"second" * 10])
    first = len(encode_message_set([b"first" * 10]))
    topic = new_topic("torn-cut")
    leader_id = next(_leader_ids)

    def old(n, corr, request):
        offset = request.partitions[0].offset
        return fetch_answer(corr, request, whole[offset:], hw=0)

    leader = FakeLeader(old)
    try:
        follow(follower, topic, leader_id, leader.port, EPOCH)
        wait_until(lambda: log_bytes(follower, topic) == whole, why="the two entries")
    finally:
        leader.stop()

    def lying(n, corr, request):
        if isinstance(request, rproto.OffsetForLeaderEpochRequest):
            p = request.partitions[0]
            return rproto.encode_response(corr, rproto.OffsetForLeaderEpochResponse((
                rproto.OffsetForLeaderEpochResult(p.topic, p.partition, 0, p.leader_epoch,
                                                  first + 7),)))
        return fetch_answer(corr, request, b"", hw=0, data_epoch=EPOCH + 1)

    leader = FakeLeader(lying)
    try:
        follow(follower, topic, leader_id, leader.port, EPOCH + 1)
        wait_until(lambda: any(isinstance(r, rproto.FetchRequestV1) for r in leader.requests),
                   why=follower.log()[-2000:])
    finally:
        leader.stop()
    asked = [r for r in leader.requests if isinstance(r, rproto.OffsetForLeaderEpochRequest)]
    assert [r.partitions[0].leader_epoch for r in asked] == [EPOCH]
    fetches = [r for r in leader.requests if isinstance(r, rproto.FetchRequestV1)]
    assert fetches[0].partitions[0].offset == first
    assert log_bytes(follower, topic) == whole[:first]


def test_a_fetch_asks_for_no_more_than_the_response_limit_and_a_larger_answer_is_refused(
        follower):
    """Twelve partitions at 1 MiB each would ask 12 MiB of one FETCH; the
    follower asks at most replica.fetch.response.max.bytes (10 MiB) over all
    of them, and a leader announcing an answer larger than that is refused
    before anything is allocated for it."""
    limit = 10 * 1024 * 1024
    topic = new_topic("wide")
    leader_id = next(_leader_ids)
    announced = limit + 1000

    def answer(n, corr, request):
        if n == 0 and isinstance(request, rproto.FetchRequestV1):
            return struct.pack(">ii", announced, corr)  # and nothing more
        return rproto.encode_response(corr, rproto.FetchResponseV1(tuple(
            rproto.FetchPartitionResultV1(p.topic, p.partition, 0, 0, 0, EPOCH, b"")
            for p in request.partitions)))

    leader = FakeLeader(answer)
    try:
        body = rproto.LeaderAndIsrRequest(99, 1, tuple(rproto.LeaderAndIsrPartition(
            topic, p, leader_id, EPOCH, (leader_id, FOLLOWER), 0, (leader_id, FOLLOWER))
            for p in range(12)), (), (MetadataBroker(leader_id, "127.0.0.1", leader.port, None),))
        with RawSocket(follower.tcp) as sock:
            sock.send(rproto.encode_request(body, 1, "test"))
            _, lai = rproto.decode_response(sock.read_frame(), rproto.LeaderAndIsrResponse)
        assert [p.error_code for p in lai.partitions] == [ErrorCode.NONE] * 12

        def fetches():
            return [r for r in leader.requests if isinstance(r, rproto.FetchRequestV1)]

        wait_until(lambda: {p.partition for r in fetches()[1:] for p in r.partitions}
                   == set(range(12)), why=follower.log()[-2000:])
        assert f"an answer of {announced} bytes" in follower.log()
    finally:
        leader.stop()
    for r in fetches():
        assert sum(p.max_bytes + 48 + len(p.topic) for p in r.partitions) + 64 <= limit
