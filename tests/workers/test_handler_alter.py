"""The handler's side of ALTER_TOPIC (issue 37): a change's generation bump
that the admin lock refused is owed and retried at every loop turn, never
waiting (until it is done, other handlers would check produces against the
old config); a change whose handler dies before sending it leaves every
partition alike, and running it again completes it; a change decided while
another's writers are at work builds on it. An in-process handler over a
real partition table and admin lock (``handler_rig``); the writers' part is
``PartitionLog.alter`` on the real partition dirs."""

from __future__ import annotations

import json
import os

from hostbroker.errors import ErrorCode
from hostbroker.log.partition import PartitionLog
from hostbroker.protocol import api
from hostbroker.protocol import topics_admin as ta
from hostbroker.shm.adminlock import AdminLock
from hostbroker.workers import envelopes as env
from tests.workers.handler_rig import Rig


def test_a_refused_bump_is_owed_and_done_once_the_lock_is_free(tmp_path):
    rig = Rig(tmp_path, [-1], admin_lock_timeout_ms=200)
    try:
        h = rig.h
        with h._admin():
            h._create_topic_locked("t", 2, {})
        rig.request(ta.AlterTopicRequest("t", -1, (api.TopicConfigEntry("flush.ms", "70"),),
                                         (), 0))
        sent = [(op, token, doc) for op, token, doc in rig.h.appends[0].json()
                if op == env.OP_ALTER_TOPIC]
        assert sorted(doc["partition"] for _, _, doc in sent) == [0, 1]
        assert all(doc["config"] == {"flush.ms": "70"} for _, _, doc in sent)
        before = rig.table.generation
        other = AdminLock.attach(rig.token, timeout=0.2)
        other.acquire()  # another process holds the lock as the writers answer
        try:
            for _, token, _ in sent:
                h._on_result(memoryview(b"".join(bytes(p) for p in env.encode_json(
                    env.OP_ALTER_TOPIC, token, {"error": 0}))))
            answer = rig.only_answer(ta.AlterTopicResponse)
            assert answer.error_code == ErrorCode.NONE
            assert rig.table.generation == before and h.bump_owed
            h._retry_owed_bump()  # a loop turn while the lock is still held: no wait
            assert rig.table.generation == before and h.bump_owed
        finally:
            other.release()
        h._retry_owed_bump()
        assert rig.table.generation == before + 1 and not h.bump_owed
        h._retry_owed_bump()
        assert rig.table.generation == before + 1
    finally:
        rig.close()


def _apply(rig, doc: dict) -> None:
    """What a writer does with an OP_ALTER_TOPIC (``writer_cleanup._alter``)."""
    log = PartitionLog.open(os.path.join(rig.dirs[0], f"{doc['topic']}_{doc['partition']}"),
                            rig.h.defaults)
    try:
        log.alter(rig.h.defaults, doc["config"], doc["partitions"], doc["stamp"])
    finally:
        log.close()


def _configs(rig, topic: str) -> dict[int, dict]:
    out = {}
    for name in os.listdir(rig.dirs[0]):
        if name.startswith(f"{topic}_"):
            with open(os.path.join(rig.dirs[0], name, "partition.json")) as f:
                meta = json.load(f)
            out[meta["partition"]] = (meta["config"], meta["partitions"])
    return out


def _alter(rig, topic: str, partitions: int, sets: dict) -> list[dict]:
    rig.h.appends[0].sent.clear()
    rig.request(ta.AlterTopicRequest(topic, partitions, tuple(
        api.TopicConfigEntry(k, v) for k, v in sets.items()), (), 0))
    return [doc for op, _, doc in rig.h.appends[0].json() if op == env.OP_ALTER_TOPIC]


def test_a_change_its_handler_never_sent_leaves_the_partitions_alike_and_runs_again(tmp_path):
    """A grow with a config change whose handler dies before its writers get
    the change: the new partitions were made as the others are, so every
    partition still agrees. The same change run again reaches every partition
    with a newer stamp; the lost change arriving late after all is ignored."""
    rig = Rig(tmp_path, [-1])
    try:
        h = rig.h
        with h._admin():
            h._create_topic_locked("t", 2, {"flush.ms": "500"})
        lost = _alter(rig, "t", 4, {"retention.ms": "60000"})
        assert sorted(d["partition"] for d in lost) == [0, 1, 2, 3]
        h.pending.clear()  # (the handler is gone: nothing of it is answered)
        rig.answered()
        assert _configs(rig, "t") == {p: ({"flush.ms": "500"}, 2 if p < 2 else 4)
                                      for p in range(4)}
        again = _alter(rig, "t", 4, {"retention.ms": "60000"})
        assert sorted(d["partition"] for d in again) == [0, 1, 2, 3]
        assert min(d["stamp"] for d in again) > max(d["stamp"] for d in lost)
        for doc in reversed(again):
            _apply(rig, doc)
        for doc in lost:
            _apply(rig, doc)  # late: an older stamp, its config not applied
        wanted = {"flush.ms": "500", "retention.ms": "60000"}
        assert _configs(rig, "t") == {p: (wanted, 4) for p in range(4)}
    finally:
        rig.close()


def test_a_change_decided_while_anothers_writers_work_builds_on_it(tmp_path):
    """Two changes of one topic decided one after the other before any writer
    applied the first (the second a grow): the second's map holds the first's
    change, its new partitions too, and whatever order the writers apply them
    in, every partition ends with the second's."""
    rig = Rig(tmp_path, [-1])
    try:
        h = rig.h
        with h._admin():
            h._create_topic_locked("t", 2, {})
        first = _alter(rig, "t", -1, {"retention.ms": "1000"})
        second = _alter(rig, "t", 3, {"flush.ms": "700"})
        assert all(d["config"] == {"retention.ms": "1000", "flush.ms": "700"} for d in second)
        assert sorted(d["partition"] for d in second) == [0, 1, 2]
        assert _configs(rig, "t")[2] == ({"retention.ms": "1000"}, 3)  # made on the first's
        for doc in second + first:  # the second's first, on every partition
            _apply(rig, doc)
        assert _configs(rig, "t") == {p: ({"retention.ms": "1000", "flush.ms": "700"}, 3)
                                      for p in range(3)}
    finally:
        rig.close()
