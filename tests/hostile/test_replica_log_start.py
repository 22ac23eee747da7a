"""Hostile leaders against a follower whose log ends below the leader's log start.

A FETCH answered OFFSET_OUT_OF_RANGE with the leader's log end past the
follower's makes ``hb-replica`` ask the leader's log start (OFFSETS
earliest), and its writer restarts the log there (docs/storage.md,
"Replicas"). A leader cannot use that to move the log anywhere else: a start
not past the follower's log end, past the log end the leader itself stated,
or an answer of more than one offset restarts nothing; and a leader whose
answers keep saying "out of range" gets at most one restart between two
backoffs, never a loop. The follower and the fake leader are those of
test_replica_fetcher.py (a real broker in cluster mode, a socket server of
the test).
"""

from __future__ import annotations

import glob
import os
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.segments import partition_dirname
from hostbroker.protocol import api
from hostbroker.protocol import replication as rproto
from tests.hostile.test_replica_fetcher import (FakeLeader, follow, follower, wait_until)
from tests.integration.wire_helpers import new_topic

__all__ = ["follower"]  # the module's follower broker (a fixture)

_leader_ids = iter(range(2001, 3000))


@pytest.fixture(autouse=True)
def any_request(monkeypatch):
    """The fake leader decodes OFFSETS (a version-0 request) too."""
    monkeypatch.setattr(rproto, "decode_request", rproto.decode_any_request)


def out_of_range(corr: int, request, leader_end: int) -> bytes:
    part = request.partitions[0]
    return rproto.encode_response(corr, rproto.FetchResponseV1((rproto.FetchPartitionResultV1(
        part.topic, part.partition, ErrorCode.OFFSET_OUT_OF_RANGE, leader_end, leader_end, -1,
        b""),)))


def bases(broker, topic: str) -> list[int]:
    where = os.path.join(broker.settings["log.dirs"], partition_dirname(topic, 0), "*.kafka")
    return sorted(int(os.path.basename(p).split(".")[0]) for p in glob.glob(where))


def fetches(leader) -> list[int]:
    return [r.partitions[0].offset for r in leader.requests
            if isinstance(r, rproto.FetchRequestV1)]


def test_a_log_start_that_is_not_one_restarts_nothing(follower):
    """The leader says out of range with its log end at 1000, then that its log
    starts past that end, at the follower's own end, or gives three offsets."""
    lies = [(5000,), (0,), (10, 20, 30), ()]

    def answer(n, corr, request):
        if isinstance(request, api.OffsetsRequest):
            asked = sum(isinstance(r, api.OffsetsRequest) for r in leader.requests)
            return api.encode_response(corr, api.OffsetsResponse(0, lies[(asked - 1) % 4]))
        return out_of_range(corr, request, 1000)

    topic = new_topic("lying-start")
    leader = FakeLeader(answer)
    try:
        follow(follower, topic, next(_leader_ids), leader.port)
        wait_until(lambda: sum(isinstance(r, api.OffsetsRequest)
                               for r in leader.requests) >= 5, why=follower.log()[-2000:])
    finally:
        leader.stop()
    assert bases(follower, topic) == [0]
    assert set(fetches(leader)) == {0}
    asked = [r for r in leader.requests if isinstance(r, api.OffsetsRequest)]
    assert {(r.topic, r.partition, r.time, r.max_offsets) for r in asked} == {
        (topic, 0, api.EARLIEST_TIME, 1)}
    assert "the leader's log starts at 5000, ends at 1000" in follower.log()


def test_a_leader_always_out_of_range_gets_one_restart_per_backoff(follower):
    """Every FETCH is out of range, and every OFFSETS names a start 100 past
    the follower's end: each restart is to the start the leader stated, and
    after one the follower backs off (replica.fetch.backoff.ms, 100 ms)
    before it asks again."""
    stated: list[int] = []

    def answer(n, corr, request):
        if isinstance(request, api.OffsetsRequest):
            stated.append(fetches(leader)[-1] + 100)
            return api.encode_response(corr, api.OffsetsResponse(0, (stated[-1],)))
        return out_of_range(corr, request, request.partitions[0].offset + 10_000)

    topic = new_topic("always-out")
    leader = FakeLeader(answer)
    started = time.monotonic()
    try:
        follow(follower, topic, next(_leader_ids), leader.port)
        wait_until(lambda: len(stated) >= 4, why=follower.log()[-2000:])
    finally:
        leader.stop()
    elapsed = time.monotonic() - started
    offsets = fetches(leader)
    assert set(offsets) <= {0, *stated}  # only where the leader said its log starts
    restarts = len(set(offsets) - {0})
    assert restarts <= elapsed / 0.1 + 1
    # after a restart, the next out-of-range FETCH backs off: it is fetched again
    # from the same offset before the leader is asked again
    kinds = ["O" if isinstance(r, api.OffsetsRequest) else "F" for r in leader.requests]
    assert "OFO" not in "".join(kinds)
    assert bases(follower, topic)[0] in stated
