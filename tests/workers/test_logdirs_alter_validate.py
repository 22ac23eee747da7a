"""hb-logdirs' ALTER_TOPIC with ``validate_only`` runs the checks the change
runs (issue 37): a grow whose new replicas the live log dirs cannot hold is
refused INVALID_REPLICATION_FACTOR whether it is only validated or made, and
neither changes anything. The rig is test_logdirs_worker's (real tables and
dirs); one dir is offline as a writer marks it when its disk fails."""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from tests.workers.test_logdirs_worker import Harness, create


def test_a_grow_the_live_dirs_cannot_place_is_refused_when_validated_too(tmp_path):
    h = Harness(tmp_path)
    try:
        create(h, partitions=1, rf=3)
        h.table.set_log_dir_offline(2)
        for validate in (True, False):
            answer = h.w._alter_topic(0, 1, {"topic": "t", "partitions": 2, "set": {},
                                             "delete": [], "validate_only": validate})
            assert answer["error"] == ErrorCode.INVALID_REPLICATION_FACTOR, (validate, answer)
        assert sorted(tp for tp in h.w.doc.parts if tp[0] == "t") == [("t", 0)]
        assert not h.w.creating
        # what the live dirs hold is validated, and nothing is made by it
        answer = h.w._alter_topic(0, 2, {"topic": "t", "partitions": -1,
                                         "set": {"flush.ms": "900"}, "delete": [],
                                         "validate_only": True})
        assert answer["error"] == ErrorCode.NONE
        assert h.w.doc.configs["t"] == {}
    finally:
        h.close()
