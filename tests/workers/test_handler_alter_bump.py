"""A config change's generation bump that the admin lock refused is owed and
retried at every loop turn, never waiting (issue 37): until it is done, other
handlers would check produces against the old config. An in-process handler
over a real partition table and admin lock (``handler_rig``)."""

from __future__ import annotations

from hostbroker.errors import ErrorCode
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
