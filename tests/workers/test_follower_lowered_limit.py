"""A follower copies the leader's entries that are longer than a
``max.message.bytes`` lowered since they were produced (issue 37): the
topic's whole config comes with each state, and a lowered limit refused the
leader's older entries for good, the follower never catching up. The
writer's follower side over a real table (``test_writer_replicas``' rig)."""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from tests.workers.test_writer_replicas import (OTHER, clock, create_replica,  # noqa: F401
                                                leo, replica_append, state, w)


def test_a_lowered_limit_does_not_refuse_the_leaders_older_entries(w):  # noqa: F811
    create_replica(w)
    assert state(w, "follower", 1, leader=OTHER,
                 config={"max.message.bytes": "1000"}) == {"error": 0, "altered": True}
    assert w.slots[next(iter(w.slots))].config.max_message_bytes == 1000
    big = encode_message_set([b"x" * 5000])
    small = encode_message_set([b"y" * 10])
    assert replica_append(w, 0, big) == (ErrorCode.NONE, len(big))
    assert replica_append(w, len(big), small) == (ErrorCode.NONE, len(big) + len(small))
    assert leo(w) == len(big) + len(small)
    damaged = bytearray(small)
    damaged[-1] ^= 0xFF  # a copy is still checked whole
    assert replica_append(w, leo(w), bytes(damaged))[0] == ErrorCode.INVALID_MESSAGE
