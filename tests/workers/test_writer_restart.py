"""A follower's writer restarting its log at the leader's log start
(OP_RESTART_LOG), driven on a real writer's methods as test_writer_replicas
does (its fixture and helpers)."""

from __future__ import annotations

import os

from hostbroker.errors import ErrorCode
from hostbroker.log import hwcheckpoint
from hostbroker.log.message import encode_message_set
from hostbroker.log.segments import segment_filename
from hostbroker.workers import envelopes as env
from hostbroker.workers.writer_replicas import FENCED_LEADER_EPOCH, NOT_LEADER
from tests.workers.test_writer_deletes import SLOT
from tests.workers.test_writer_replicas import (OTHER, clock, create_replica, replica_append,
                                                state, w)

__all__ = ["clock", "w"]  # fixtures


def restart(w, offset, epoch=1, **extra):
    return w._restart_log({"slot": SLOT, "topic": "r", "partition": 0, "leader_epoch": epoch,
                           "offset": offset, **extra})


def test_a_follower_restarts_its_log_at_the_leaders_log_start(w):
    create_replica(w)
    state(w, "follower", 1, leader=OTHER)
    one = encode_message_set([b"one"])
    replica_append(w, 0, one, leader_hw=len(one))
    assert w.books[SLOT].epochs.entries
    start = 10_000
    assert restart(w, start) == {"error": 0, "log_end": start}
    plog = w.slots[SLOT]
    assert (plog.log_start_offset, plog.log_end_offset) == (start, start)
    assert sorted(n for n in os.listdir(plog.path) if n.endswith(".kafka")) == \
        [segment_filename(start)]
    assert w.books[SLOT].epochs.entries == ()
    s = w.table.read(SLOT)
    assert (s.start_offset, s.end_offset, s.high_watermark) == (start, start, start)
    assert hwcheckpoint.read_high_watermarks(w.path)[0][("r", 0)] == start
    # it copies on from there, the leader's epoch recorded at the new start
    two = encode_message_set([b"two"])
    assert replica_append(w, start, two, leader_hw=start) == (ErrorCode.NONE, start + len(two))
    assert w.books[SLOT].epochs.entries == ((1, start),)


def test_a_restart_is_refused_unless_past_the_log_end_for_a_follower_in_its_epoch(w):
    create_replica(w)
    state(w, "follower", 2, leader=OTHER)
    one = encode_message_set([b"one"])
    replica_append(w, 0, one, epoch=2, data_epoch=2)
    for offset in (0, len(one), 2**63):
        assert restart(w, offset, epoch=2)["error"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert restart(w, 500, epoch=1)["error"] == FENCED_LEADER_EPOCH
    assert restart(w, 500, epoch=3)["error"] == NOT_LEADER
    assert restart(w, "x", epoch=2)["error"] == ErrorCode.INVALID_REQUEST
    assert restart(w, 500, epoch=2, topic="other")["error"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    state(w, "leader", 3)
    assert restart(w, 500, epoch=3)["error"] == NOT_LEADER  # a leader never restarts
    plog = w.slots[SLOT]
    assert (plog.log_start_offset, plog.log_end_offset) == (0, len(one))


def test_the_op_comes_and_goes_on_the_replica_rings(w):
    head, body = env.encode_restart_log(7, {"slot": SLOT, "offset": 1})
    op, token = env.decode_op(memoryview(head + body))
    assert (op, token) == (env.OP_RESTART_LOG, 7)
    assert env.decode_json(memoryview(head + body)) == {"slot": SLOT, "offset": 1}
