"""The handler's side of replicas across log dirs (``workers/handler_logdirs.py``,
``handler_topics.py``): METADATA v0/v1/v2 answers, and what it forwards to
hb-logdirs (OP_LOCAL_ADMIN) and answers from what comes back.

A real handler's request path over real tables (``handler_rig.py``); the
replication state file copies are real files in the log dirs."""

from __future__ import annotations

import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.protocol import logdirs as lproto
from hostbroker.protocol import replication as rproto
from hostbroker.replication.localstate import (
    STATE_FILE,
    LocalState,
    PartitionState,
    TopicState,
    encode_state,
)
from hostbroker.shm import partitions as ptable
from hostbroker.workers import envelopes as env

from tests.integration.broker import Broker
from tests.integration.wire_helpers import wait_for
from tests.workers.handler_rig import BROKER_ID, Rig, claim

IDS = [7, 3, 5]


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path, IDS)
    yield r
    r.close()


def _placed(rig: Rig) -> None:
    """t-0 on dirs 5 (leader, writer 2) and 7 (writer 0), its ISR short; a
    plain p-0 on dir 3 (writer 1)."""
    claim(rig.table, 0, "t", 0, owner=0, replicas=[5, 7], leader=5, epoch=2, end=9, hw=6,
          isr=[5])
    claim(rig.table, 1, "t", 0, owner=2, replicas=[5, 7], role=ptable.ROLE_LEADER, leader=5,
          epoch=2, end=9, hw=6, isr=[5])
    rig.table.write(2, state=ptable.ONLINE, name="p", partition=0, owner=1, start_offset=0,
                    end_offset=3, flushed_offset=3, segment_generation=1)
    rig.table.bump_generation()


def _metadata_v2(rig: Rig, *topics: str) -> lproto.MetadataResponseV2:
    rig.request(lproto.MetadataRequestV2(topics))
    return rig.only_answer(lproto.MetadataResponseV2)


def test_metadata_v2_names_each_partitions_dirs_and_the_brokers_log_dirs(rig):
    _placed(rig)
    answer = _metadata_v2(rig, "t", "p", "nope")
    (t0,), (p0,), () = (topic.partitions for topic in answer.topics)
    assert answer.topics[2].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # version 1's fields: one partition of this broker, in its leader's dir
    assert (t0.leader, t0.leader_epoch, t0.replicas, t0.isr) == (
        BROKER_ID, 2, (BROKER_ID,), (BROKER_ID,))
    assert (t0.high_watermark, t0.log_dir) == (6, rig.dirs[2])
    assert (t0.leader_dir, t0.replica_dirs, t0.isr_dirs, t0.target_dirs) == (5, (5, 7), (5,), ())
    # a plain partition is on its own dir alone
    assert (p0.leader, p0.high_watermark, p0.log_dir) == (BROKER_ID, 3, rig.dirs[1])
    assert (p0.leader_dir, p0.replica_dirs, p0.isr_dirs, p0.target_dirs) == (3, (3,), (3,), ())
    assert [(d.dir_id, d.path, d.state) for d in answer.log_dirs] == [
        (7, rig.dirs[0], lproto.DIR_ONLINE), (3, rig.dirs[1], lproto.DIR_ONLINE),
        (5, rig.dirs[2], lproto.DIR_ONLINE)]


def test_metadata_v1_and_v2_of_a_partition_with_no_leader(rig):
    claim(rig.table, 0, "t", 0, owner=0, replicas=[7, 3], epoch=4, end=2, hw=2)
    claim(rig.table, 1, "t", 0, owner=1, replicas=[7, 3], epoch=4, end=2, hw=2)
    rig.table.bump_generation()
    rig.request(rproto.MetadataRequestV1(("t",)))
    (v1,) = rig.only_answer(rproto.MetadataResponseV1).topics[0].partitions
    assert (v1.leader, v1.replicas, v1.isr, v1.log_dir) == (
        -1, (BROKER_ID,), (BROKER_ID,), rig.dirs[0])
    (v2,) = _metadata_v2(rig, "t").topics[0].partitions
    assert (v2.leader, v2.leader_dir, v2.replica_dirs, v2.isr_dirs) == (-1, -1, (7, 3), (7, 3))


def test_the_state_file_gives_targets_and_missing_dirs_newest_copy_first(rig):
    _placed(rig)
    old = LocalState(seq=3, online=(3, 5, 7), dirs={3: rig.dirs[1], 5: rig.dirs[2], 7: rig.dirs[0]},
                     topics={"t": TopicState({}, {0: PartitionState((5, 7), 5, 2, (5,), 1)})})
    new = LocalState(seq=4, online=(3, 5, 7), dirs={**old.dirs, 9: "/srv/gone"},
                     topics={"t": TopicState({}, {0: PartitionState((5, 7), 5, 2, (5,), 2,
                                                                     (5, 3))})})
    with open(f"{rig.dirs[0]}/{STATE_FILE}", "wb") as f:
        f.write(encode_state(old))
    with open(f"{rig.dirs[1]}/{STATE_FILE}", "wb") as f:
        f.write(encode_state(new))
    with open(f"{rig.dirs[2]}/{STATE_FILE}", "wb") as f:
        f.write(b'{"version": 1, "seq": 99, "online": "garbage"')  # a damaged copy: skipped
    answer = _metadata_v2(rig, "t")
    (t0,) = answer.topics[0].partitions
    assert t0.target_dirs == (5, 3)
    assert [(d.dir_id, d.path, d.state) for d in answer.log_dirs][3:] == [
        (9, "/srv/gone", lproto.DIR_MISSING)]
    # the reassignment done: the answer follows the file
    done = LocalState(seq=5, online=(3, 5, 7), dirs=old.dirs,
                      topics={"t": TopicState({}, {0: PartitionState((5, 3), 5, 3, (5, 3), 3)})})
    with open(f"{rig.dirs[1]}/{STATE_FILE}", "wb") as f:
        f.write(encode_state(done))
    answer = _metadata_v2(rig, "t")
    assert answer.topics[0].partitions[0].target_dirs == ()
    assert [d.dir_id for d in answer.log_dirs] == [7, 3, 5]


def test_an_offline_dir_and_a_dir_with_no_id(tmp_path):
    rig = Rig(tmp_path, [7, -1, 5])
    try:
        rig.table.set_log_dir_offline(2)
        answer = _metadata_v2(rig)
        # the dir with no id is listed as -1, online while its writer flags nothing
        assert [(d.dir_id, d.path, d.state) for d in answer.log_dirs] == [
            (7, rig.dirs[0], lproto.DIR_ONLINE), (-1, rig.dirs[1], lproto.DIR_ONLINE),
            (5, rig.dirs[2], lproto.DIR_OFFLINE)]
        rig.table.set_log_dir_offline(1)
        assert [d.state for d in _metadata_v2(rig).log_dirs][1] == lproto.DIR_OFFLINE
    finally:
        rig.close()


# -- the state file copies, read in the handler's loop ----------------------------

def _copy(rig: Rig, w: int, seq: int, target=()) -> str:
    state = LocalState(seq=seq, online=(3, 5, 7),
                       dirs={3: rig.dirs[1], 5: rig.dirs[2], 7: rig.dirs[0]},
                       topics={"t": TopicState({}, {0: PartitionState((5, 7), 5, 2, (5,), seq,
                                                                       target)})},
                       deleting=("gone", "going"))
    path = f"{rig.dirs[w]}/{STATE_FILE}"
    with open(path, "wb") as f:
        f.write(encode_state(state))
    return path


def test_only_the_newest_copy_is_decoded(rig, monkeypatch):
    from hostbroker.replication import localstate

    _placed(rig)
    _copy(rig, 0, 5)
    newest = _copy(rig, 1, 6, target=(5, 3))
    _copy(rig, 2, 4)
    decoded = []
    real = localstate.decode_state
    monkeypatch.setattr(localstate, "decode_state",
                        lambda raw, path, limits: decoded.append(path) or real(raw, path, limits))
    (t0,) = _metadata_v2(rig, "t").topics[0].partitions
    assert t0.target_dirs == (5, 3) and decoded == [newest]
    # the newest copy damaged past its head: the next newest serves
    with open(newest, "r+b") as f:
        f.truncate(os.path.getsize(newest) - 3)
    decoded.clear()
    assert _metadata_v2(rig, "t").topics[0].partitions[0].target_dirs == ()
    assert decoded == [newest, f"{rig.dirs[0]}/{STATE_FILE}"]


def test_a_copy_s_seq_is_read_from_its_head_as_encode_state_writes_it(tmp_path):
    from hostbroker.workers.handler_logdirs import peek_seq

    path = tmp_path / STATE_FILE
    for seq in (0, 7, 2**63 - 1):
        path.write_bytes(encode_state(LocalState(seq=seq, online=(1,), dirs={
            1: '/srv/"online":[1],"seq":99,"topics":'}, deleting=("a", "b"))))
        assert peek_seq(str(path)) == seq
    path.write_bytes(b'{"version": 1, "seq": 99, "online": "garbage"')
    assert peek_seq(str(path)) == -1


def test_offline_dirs_state_files_are_never_looked_at(rig, monkeypatch):
    from hostbroker.shm.logdirs import LD_OFFLINE, LD_REOPENING

    _placed(rig)
    for w in range(3):
        _copy(rig, w, 5 + w, target=(5, 3) if w == 0 else ())
    rig.table.set_log_dir_offline(2)  # its writer's flag
    rig.logdirs.set_state(1, LD_REOPENING)  # (hb-logdirs' state of it)
    looked = []
    real = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: looked.append(str(path)) or real(
        path, *a, **k))
    answer = _metadata_v2(rig, "t")
    assert [p for p in looked if p.endswith(STATE_FILE)] == [f"{rig.dirs[0]}/{STATE_FILE}"]
    assert answer.topics[0].partitions[0].target_dirs == (5, 3)  # (the newest of those read)
    rig.logdirs.set_state(0, LD_OFFLINE)
    looked.clear()
    _metadata_v2(rig, "t")
    assert not [p for p in looked if p.endswith(STATE_FILE)]


def test_with_no_replica_online_the_leader_dir_is_none(rig):
    claim(rig.table, 0, "t", 0, owner=0, replicas=[7, 3], role=ptable.ROLE_LEADER, leader=7,
          epoch=4, state=ptable.OFFLINE)
    claim(rig.table, 1, "t", 0, owner=1, replicas=[7, 3], leader=7, epoch=4,
          state=ptable.OFFLINE)
    rig.table.bump_generation()
    (v2,) = _metadata_v2(rig, "t").topics[0].partitions
    assert (v2.error_code, v2.leader_dir, v2.replica_dirs) == (
        ErrorCode.STORAGE_ERROR, -1, (7, 3))


# -- creation ----------------------------------------------------------------

def _create(rig: Rig, topic: str, partitions: int, rf: int, **configs) -> None:
    entries = tuple(api.TopicConfigEntry(k.replace("_", "."), str(v)) for k, v in configs.items())
    rig.request(lproto.CreateTopicRequestV1(topic, partitions, entries, rf))


def _admin(rig: Rig) -> tuple:
    answer = rig.only_answer(api.AdminResponse)
    return answer.error_code, answer.error_message


def test_a_replicated_create_goes_to_hb_logdirs_and_its_answer_comes_back(rig):
    _create(rig, "r", 3, 2, retention_ms=60000)
    assert rig.answered() == []  # parked until hb-logdirs answers
    ((op, token, doc),) = rig.to_logdirs.json()
    assert op == env.OP_LOCAL_ADMIN
    assert doc == {"op": "create", "topic": "r", "partitions": 3, "rf": 2,
                   "config": {"retention.ms": "60000"}}
    rig.answer(token, {"error": 0, "message": None, "results": []})
    assert _admin(rig) == (ErrorCode.NONE, None)
    # its refusal, as it says it
    _create(rig, "s", 1, 3)
    ((_, token, _),) = rig.to_logdirs.json()[1:]
    line = "replication factor 3 needs 3 usable log dirs; the broker has 2 (1 offline)"
    rig.answer(token, {"error": ErrorCode.INVALID_REPLICATION_FACTOR, "message": line,
                       "results": []})
    assert _admin(rig) == (ErrorCode.INVALID_REPLICATION_FACTOR, line)


def test_replication_factor_minus_one_takes_the_default(tmp_path):
    rig = Rig(tmp_path, IDS)
    try:
        _create(rig, "one", 2, lproto.DEFAULT_REPLICATION_FACTOR)
        assert _admin(rig) == (ErrorCode.NONE, None)  # made here: one replica each
        assert rig.to_logdirs.sent == []
        rig.h.view.refresh()
        assert len(rig.h.view.topics["one"]) == 2 and not rig.h.view.dirs_placed
    finally:
        rig.close()
    rig = Rig(tmp_path / "b", IDS, default_replication_factor=2)
    try:
        _create(rig, "two", 2, lproto.DEFAULT_REPLICATION_FACTOR)
        ((_, _, doc),) = rig.to_logdirs.json()
        assert (doc["topic"], doc["rf"]) == ("two", 2)
        # CREATE_TOPIC v0 stays one replica
        rig.request(api.CreateTopicRequest("zero", 1))
        assert _admin(rig) == (ErrorCode.NONE, None)
        assert len(rig.to_logdirs.sent) == 1
    finally:
        rig.close()


@pytest.mark.parametrize("case, code, line", [
    ("min_isr", ErrorCode.INVALID_CONFIG,
     "min.insync.replicas 3 is more than the replication factor 2"),
    ("exists", ErrorCode.TOPIC_ALREADY_EXISTS, "topic p already exists"),
    ("one_dir", ErrorCode.INVALID_REPLICATION_FACTOR,
     "replication factor 2 needs 2 usable log dirs; the broker has 1"),
    ("cluster", ErrorCode.INVALID_REQUEST,
     "a cluster broker's replicated topics are created with --zookeeper"),
])
def test_refused_creations_say_why_in_one_line_and_forward_nothing(tmp_path, case, code, line):
    rig = (Rig(tmp_path, [7]) if case == "one_dir"
           else Rig(tmp_path, [7, 3], cluster=True) if case == "cluster" else Rig(tmp_path, IDS))
    try:
        if case == "exists":
            _placed(rig)
        _create(rig, "p", 1, 2, **({"min_insync_replicas": 3} if case == "min_isr" else {}))
        assert _admin(rig) == (code, line)
        assert rig.h.logdirs_peer is None or rig.to_logdirs.sent == []
    finally:
        rig.close()


def test_a_replication_factor_past_eight_is_refused_as_the_request_is_decoded(rig):
    frame = bytearray(rproto.encode_request(lproto.CreateTopicRequestV1("x", 1, (), 2), 3, "t"))
    frame[-2:] = (9).to_bytes(2, "big")  # what the client would refuse to send
    rig.h._on_request(0, memoryview(env.REQ_HEADER.pack(7, 0, 0, 0) + bytes(frame[4:])))
    assert rig.only_answer() == (3, ErrorCode.INVALID_REQUEST)
    assert rig.to_logdirs.sent == []


# -- deletion, reassignment, log dir admin --------------------------------------

def test_deleting_a_dir_placed_topic_goes_to_hb_logdirs_and_a_plain_one_to_its_writer(rig):
    _placed(rig)
    rig.request(api.DeleteTopicRequest("t"))
    ((_, token, doc),) = rig.to_logdirs.json()
    assert doc == {"op": "delete", "topic": "t"}
    assert all(not a.sent for a in rig.h.appends[:3])
    rig.answer(token, {"error": 0, "message": None, "results": []})
    assert _admin(rig) == (ErrorCode.NONE, None)
    rig.request(api.DeleteTopicRequest("p"))
    assert len(rig.to_logdirs.sent) == 1 and len(rig.h.appends[1].sent) == 1


def test_alter_replica_dirs_is_forwarded_and_each_partition_answered(rig):
    _placed(rig)
    rig.request(lproto.AlterReplicaDirsRequest((
        lproto.AlterReplicaDirsPartition("t", 0, (3, 5)),
        lproto.AlterReplicaDirsPartition("u", 1, (7,)))))
    ((_, token, doc),) = rig.to_logdirs.json()
    assert doc == {"op": "alter", "partitions": [["t", 0, [3, 5]], ["u", 1, [7]]]}
    rig.answer(token, {"error": 0, "message": None,
                       "results": [["t", 0, 0], ["u", 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]]})
    answer = rig.only_answer(lproto.AlterReplicaDirsResponse)
    assert answer.error_code == ErrorCode.NONE
    assert [(p.topic, p.partition, p.error_code) for p in answer.partitions] == [
        ("t", 0, ErrorCode.NONE), ("u", 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    # one move at a time: hb-logdirs' refusal reaches the tool whole
    rig.request(lproto.AlterReplicaDirsRequest((lproto.AlterReplicaDirsPartition("t", 0, (7,)),)))
    ((_, token, _),) = rig.to_logdirs.json()[1:]
    rig.answer(token, {"error": ErrorCode.INVALID_REQUEST,
                       "message": "a reassignment is in progress", "results": []})
    answer = rig.only_answer(lproto.AlterReplicaDirsResponse)
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.INVALID_REQUEST, "a reassignment is in progress")
    assert [p.error_code for p in answer.partitions] == [ErrorCode.INVALID_REQUEST]


def test_log_dir_admin_is_forwarded(rig):
    rig.request(lproto.LogDirAdminRequest(lproto.ACTION_ONLINE, rig.dirs[1], -1))
    rig.request(lproto.LogDirAdminRequest(lproto.ACTION_FORGET, None, 9), seq=1)
    (_, t1, online), (_, t2, forget) = rig.to_logdirs.json()
    assert (online, forget) == ({"op": "online", "path": rig.dirs[1]},
                                {"op": "forget", "dir_id": 9})
    rig.answer(t2, {"error": ErrorCode.LOG_DIR_NOT_FOUND, "message": "no log dir 9",
                    "results": []})
    rig.answer(t1, {"error": 0, "message": None, "results": []})
    answers = rig.answered()
    decoded = {seq: rproto.decode_response(frame, lproto.LogDirAdminResponse)[1]
               for seq, _, frame in answers}
    assert (decoded[0].error_code, decoded[1].error_code, decoded[1].error_message) == (
        ErrorCode.NONE, ErrorCode.LOG_DIR_NOT_FOUND, "no log dir 9")


def test_a_broker_without_hb_logdirs_refuses_its_requests_in_one_line(tmp_path):
    rig = Rig(tmp_path, [7])
    try:
        rig.request(lproto.LogDirAdminRequest(lproto.ACTION_FORGET, None, 9))
        answer = rig.only_answer(lproto.LogDirAdminResponse)
        assert answer.error_code == ErrorCode.INVALID_REQUEST
        assert answer.error_message == ("replicas across log dirs need a standalone broker "
                                        "with two or more log dirs (this one has 1 log dir)")
    finally:
        rig.close()


# -- auto-creation -------------------------------------------------------------

def _produce(rig: Rig, topic: str, seq: int = 0) -> ErrorCode:
    rig.request(api.ProduceRequest(1, 1000, (api.ProducePartition(
        topic, 0, encode_message_set([b"v"])),)), seq=seq)
    _, response = api.decode_response(api.ApiKey.PRODUCE, rig.only_answer())
    return response.partitions[0].error_code


def test_auto_create_with_a_default_replication_factor_asks_once_and_answers_retriable(tmp_path):
    rig = Rig(tmp_path, IDS, default_replication_factor=2)
    try:
        assert _produce(rig, "auto") == ErrorCode.LEADER_NOT_AVAILABLE
        assert _produce(rig, "auto", 1) == ErrorCode.LEADER_NOT_AVAILABLE
        ((_, _, doc),) = rig.to_logdirs.json()  # asked once, not at every produce
        assert doc == {"op": "create", "topic": "auto", "partitions": 1, "rf": 2, "config": {}}
        # created: the first replica serves; its writer answers until it leads
        claim(rig.table, 0, "auto", 0, owner=0, replicas=[7, 3])
        claim(rig.table, 1, "auto", 0, owner=1, replicas=[7, 3], role=ptable.ROLE_LEADER,
              leader=3)
        rig.table.bump_generation()
        rig.request(api.ProduceRequest(1, 1000, (api.ProducePartition(
            "auto", 0, encode_message_set([b"v"])),)), seq=2)
        assert rig.answered() == [] and len(rig.h.appends[1].sent) == 1  # to the leader's writer
    finally:
        rig.close()


def test_auto_create_with_too_few_usable_dirs_is_refused_and_logged_once(tmp_path, capsys):
    rig = Rig(tmp_path, IDS, default_replication_factor=3)
    try:
        rig.table.set_log_dir_offline(1)
        assert _produce(rig, "auto") == ErrorCode.INVALID_REPLICATION_FACTOR
        assert _produce(rig, "auto", 1) == ErrorCode.INVALID_REPLICATION_FACTOR
        assert rig.to_logdirs.sent == []
        lines = capsys.readouterr().err.splitlines()
        assert lines == ["hostbroker: hb-handler-0: topic auto not created: replication factor 3 "
                         "needs 3 usable log dirs; the broker has 2 (1 offline) "
                         "(default.replication.factor)"]
    finally:
        rig.close()


# -- a real broker --------------------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("md2")
    b = Broker(root, log_dirs=",".join(str(root / f"d{i}") for i in range(3))).start()
    yield b
    b.stop()


def _v2(client, *topics):
    return client.request(lproto.MetadataRequestV2(topics))


def test_a_real_broker_creates_serves_and_deletes_a_topic_across_log_dirs(broker):
    c = broker.client()
    assert c.request(lproto.CreateTopicRequestV1("rt", 2, (), 2)).error_code == ErrorCode.NONE

    def led():
        md = _v2(c, "rt")
        parts = md.topics[0].partitions
        if md.topics[0].error_code or len(parts) != 2:
            return None
        # (the dir the state names leader is told so in the pass after: until it
        # serves, METADATA's leader is -1)
        return md if all(p.leader_dir != -1 and p.leader != -1 and p.isr_dirs == p.replica_dirs
                         for p in parts) else None

    md = wait_for(led)
    assert md, _v2(c, "rt")
    paths = {d.dir_id: d.path for d in md.log_dirs}
    assert len(paths) == 3 and all(d.state == lproto.DIR_ONLINE for d in md.log_dirs)
    for part in md.topics[0].partitions:
        assert len(set(part.replica_dirs)) == 2 and set(part.replica_dirs) <= set(paths)
        assert part.leader_dir == part.replica_dirs[0]
        assert (part.leader, part.replicas, part.log_dir) == (
            md.broker_id, (md.broker_id,), paths[part.leader_dir])
    # the preferred leaders are on distinct dirs (placement balances leaders)
    assert len({p.leader_dir for p in md.topics[0].partitions}) == 2
    for p in (0, 1):
        sent = c.produce("rt", p, encode_message_set([f"hello-{p}".encode()]), acks=-1)
        got = c.fetch("rt", p, 0, 1 << 16)  # below the high watermark: acks=-1 waited for it
        assert got.log_end_offset == sent.log_end_offset > 0
        assert f"hello-{p}".encode() in bytes(got.message_set)
    refused = c.request(lproto.CreateTopicRequestV1("four", 1, (), 4))
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "replication factor 4 needs 4 usable log dirs; the broker has 3")
    assert c.request(api.DeleteTopicRequest("rt")).error_code == ErrorCode.NONE
    assert wait_for(
        lambda: _v2(c, "rt").topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert wait_for(lambda: not any(name.startswith("rt_") for path in paths.values()
                             for name in os.listdir(path)))


def test_a_real_broker_auto_creates_with_its_default_replication_factor(tmp_path):
    b = Broker(tmp_path, log_dirs=",".join(str(tmp_path / f"d{i}") for i in range(2)),
               default_replication_factor=2).start()
    try:
        c = b.client()
        data = encode_message_set([b"auto"])
        first = c.produce("auto", 0, data, acks=-1, raise_on_error=False)
        assert first.error_code == ErrorCode.LEADER_NOT_AVAILABLE  # retriable: being created
        assert wait_for(lambda: c.produce("auto", 0, data, acks=-1, raise_on_error=False)
                        .error_code == ErrorCode.NONE)
        (part,) = _v2(c, "auto").topics[0].partitions
        assert len(part.replica_dirs) == 2 and part.leader_dir == part.replica_dirs[0]
    finally:
        b.stop()
