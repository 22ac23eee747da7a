"""Round trips of the replication messages between handlers, hb-replica and writers."""

from __future__ import annotations

from hostbroker.workers import envelopes as env


def test_follower_pos_round_trip():
    pos = env.FollowerPos(slot=9, topic="tö", partition=3, replica_id=2, leader_epoch=7,
                          offset=2**40)
    m = env.encode_follower_pos(pos)
    assert env.decode_op(m) == (env.OP_FOLLOWER_POS, 0)
    assert env.decode_follower_pos(memoryview(m)) == pos


def test_replica_append_round_trip():
    a = env.ReplicaAppend(token=77, slot=1, topic="t", partition=0, leader_epoch=3, data_epoch=2,
                          base_offset=100, leader_hw=90, message_set=b"abc")
    head, body = env.encode_replica_append(a)
    m = memoryview(head + body)
    assert env.decode_op(m) == (env.OP_REPLICA_APPEND, 77)
    got = env.decode_replica_append(m)
    assert got._replace(message_set=bytes(got.message_set)) == a
    r = env.encode_replica_append_result(77, 26, 123)
    assert env.decode_op(r) == (env.OP_REPLICA_APPEND, 77)
    assert env.decode_replica_append_result(r) == (77, 26, 123)


def test_replica_state_and_truncate_are_json():
    state = {"slot": 1, "topic": "t", "partition": 0, "role": "leader", "leader": 1,
             "leader_epoch": 2, "isr": [1, 2], "isr_version": 0, "replicas": [1, 2],
             "delete": False, "config": {}}
    head, body = env.encode_replica_state(5, state)
    assert env.decode_op(head + body) == (env.OP_REPLICA_STATE, 5)
    assert env.decode_json(head + body) == state
    head, body = env.encode_truncate(6, {"slot": 1, "offset": 4})
    assert env.decode_op(head + body) == (env.OP_TRUNCATE, 6)
    assert env.decode_json(head + body) == {"slot": 1, "offset": 4}
