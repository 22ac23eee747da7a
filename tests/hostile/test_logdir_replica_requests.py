"""Standing cases: a client cannot take over a partition whose replicas sit
on several log dirs of a standalone broker (docs/storage.md, "Replicas across
log dirs"). hb-logdirs alone gives those replicas their roles and moves their
high watermark; a handler refuses whatever would do it from the wire:

- a LEADER_AND_ISR or STOP_REPLICA naming such a partition (any client that
  names the controller epoch is taken on a standalone broker: issue 38's
  access control is not there yet): INVALID_REQUEST, nothing sent to a writer;
- a FETCH v1 posing as one of its followers, with a replica id that is one
  of its log dir ids: NOT_LEADER_FOR_PARTITION, and no follower position
  reaches the leader's writer (it would move the ISR and the high watermark);
- state file copies that are not files (a link, a directory) or garbage:
  never followed, and METADATA v2 still answers.

A real handler's request path over real tables (``tests/workers/handler_rig.py``).
"""

from __future__ import annotations

import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.protocol import logdirs as lproto
from hostbroker.protocol import replication as rproto
from hostbroker.replication import localstate
from hostbroker.replication.localstate import STATE_FILE
from hostbroker.shm import partitions as ptable
from hostbroker.shm.peers import PeersTable
from hostbroker.shm.region import region_name
from hostbroker.workers import envelopes as env

from tests.workers.handler_rig import BROKER_ID, Rig, claim


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path, [7, 3])
    r.peers = PeersTable.create(region_name(r.token, "peers", 0))
    r.h.peers = r.peers
    claim(r.table, 0, "t", 0, owner=0, replicas=[7, 3], role=ptable.ROLE_LEADER, leader=7,
          epoch=1, end=5, hw=2, isr=[7])
    claim(r.table, 1, "t", 0, owner=1, replicas=[7, 3], leader=7, epoch=1, end=2, hw=2, isr=[7])
    r.table.bump_generation()
    yield r
    r.peers.close()
    r.close()


def _nothing_sent_to_writers(rig: Rig) -> bool:
    return all(not a.sent for a in rig.h.appends[:rig.h.plan.num_writers])


def test_leader_and_isr_cannot_give_a_dir_placed_replica_a_role(rig):
    before = [rig.table.read(i) for i in (0, 1)]
    rig.request(rproto.LeaderAndIsrRequest(1, 5, (
        # naming this broker a replica: a cluster replica's request, aimed at it
        rproto.LeaderAndIsrPartition("t", 0, BROKER_ID, 9, (BROKER_ID,), 1, (BROKER_ID, 7)),)))
    answer = rig.only_answer(rproto.LeaderAndIsrResponse)
    assert [(p.topic, p.partition, p.error_code) for p in answer.partitions] == [
        ("t", 0, ErrorCode.INVALID_REQUEST)]
    assert _nothing_sent_to_writers(rig)
    assert [rig.table.read(i) for i in (0, 1)] == before


@pytest.mark.parametrize("delete", [0, 1])
def test_stop_replica_cannot_stop_or_delete_a_dir_placed_replica(rig, delete):
    rig.request(rproto.StopReplicaRequest(1, 5, delete, (rproto.StopReplicaPartition("t", 0),)))
    answer = rig.only_answer(rproto.StopReplicaResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.INVALID_REQUEST]
    assert _nothing_sent_to_writers(rig)


@pytest.mark.parametrize("replica_id", [3, 7, 4, 0])
def test_a_fetch_posing_as_a_follower_moves_nothing(rig, replica_id):
    rig.request(rproto.FetchRequestV1(replica_id, 0, 0, (
        rproto.FetchPartitionV1("t", 0, 1, 5, 1 << 20),)))
    ((_, _, frame),) = rig.answered()
    _, response = rproto.decode_response(frame, rproto.FetchResponseV1)
    assert [p.error_code for p in response.partitions] == [
        ErrorCode.NOT_LEADER_FOR_PARTITION]
    for a in rig.h.appends:  # no OP_FOLLOWER_POS: the ISR and high watermark stay
        assert all(env.decode_op(m)[0] != env.OP_FOLLOWER_POS for m in a.sent)
    s = rig.table.read(0)
    assert (s.isr_ids, s.high_watermark) == ((7,), 2)


def _distinctive_state() -> bytes:
    """A whole, valid state document that would show if read: t-0 moving to
    dir 3 alone, and a dir 99 that no configured dir holds (missing)."""
    return localstate.encode_state(localstate.LocalState(
        seq=1, online=(7, 3), dirs={7: "/a", 3: "/b", 99: "/elsewhere"},
        topics={"t": localstate.TopicState({}, {0: localstate.PartitionState(
            (7, 3), 7, 1, (7,), 1, target=(3,))})}))


def test_a_state_file_copy_that_is_a_file_is_read(rig):
    """The control of the case below: the same document as a file is read."""
    for d in rig.dirs:
        with open(os.path.join(d, STATE_FILE), "wb") as f:
            f.write(_distinctive_state())
    rig.request(lproto.MetadataRequestV2(("t",)))
    answer = rig.only_answer(lproto.MetadataResponseV2)
    (t0,) = answer.topics[0].partitions
    assert t0.target_dirs == (3,)
    assert [(d.dir_id, d.state) for d in answer.log_dirs] == [
        (7, lproto.DIR_ONLINE), (3, lproto.DIR_ONLINE), (99, lproto.DIR_MISSING)]


@pytest.mark.parametrize("kind", ["link", "dir", "garbage", "huge_seq"])
def test_state_file_copies_that_are_not_documents_are_never_followed(rig, tmp_path, kind):
    # a link's target is a whole document: followed, it would show
    secret = tmp_path / "elsewhere.json"
    secret.write_bytes(_distinctive_state())
    for d in rig.dirs:
        path = os.path.join(d, STATE_FILE)
        if kind == "link":
            os.symlink(secret, path)
        elif kind == "dir":
            os.mkdir(path)
        elif kind == "garbage":
            with open(path, "wb") as f:
                f.write(os.urandom(4096))
        else:
            with open(path, "w") as f:
                f.write('{"version":1,"seq":%d,"online":[],"dirs":{},"topics":{},'
                        '"deleting":[]}' % 2**70)
    rig.request(lproto.MetadataRequestV2(("t",)))
    answer = rig.only_answer(lproto.MetadataResponseV2)
    (t0,) = answer.topics[0].partitions
    assert (t0.leader_dir, t0.replica_dirs, t0.isr_dirs, t0.target_dirs) == (7, (7, 3), (7,), ())
    assert [d.dir_id for d in answer.log_dirs] == [7, 3]
