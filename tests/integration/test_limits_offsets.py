"""Consumer offsets against a real broker: what is acknowledged survives restarts, and the
store stays bounded (issue 7, item 5).

Each test starts its own broker on a root of its own, restarts it on the same
root and reads back over the sockets what it was told was stored.
No broker is shared: three tests kill or stop theirs, and the one that does not
(missing topics) has no other test on a broker it could share.
"""

from __future__ import annotations

import os
import time

from hostbroker.errors import ErrorCode
from hostbroker.log.offsetstore import COMPACT_SUFFIX, FILENAME
from tests.integration.wire_helpers import new_topic

RECORD_MAX = 64 * 1024


def store_path(root) -> str:
    return os.path.join(root, "logs", FILENAME)


def test_a_commit_over_the_record_limit_is_refused_and_later_commits_survive(make_broker,
                                                                             tmp_path):
    root = tmp_path / "b"
    root.mkdir()
    topic, group, other = new_topic(), new_topic("group"), new_topic("group")
    broker = make_broker(root=root, offsets_record_max_bytes=RECORD_MAX)
    acknowledged = {}
    with broker.client() as c:
        c.create_topic(topic, 40)
        (ok,) = c.offset_commit(group, [(topic, 0, 10, "first")])
        assert ok.error_code == ErrorCode.NONE
        acknowledged[(group, 0)] = (10, "first")
        # 40 entries of 4 KiB metadata: about 160 KiB, over the 64 KiB record limit.
        too_big = [(topic, p, 99, "x" * 4096) for p in range(40)]
        results = c.offset_commit(group, too_big, raise_on_error=False)
        assert {r.error_code for r in results} == {ErrorCode.INVALID_REQUEST}
        for p in range(1, 40):
            assert c.offset_fetch(group, [(topic, p)])[0].offset == -1
        # Commits after it, of this group and another, are acknowledged and must all stay.
        for i in range(20):
            c.offset_commit(group, [(topic, i % 3, 100 + i, f"g{i}")])
            c.offset_commit(other, [(topic, 7, 200 + i, None)])
            acknowledged[(group, i % 3)] = (100 + i, f"g{i}")
        acknowledged[(other, 7)] = (219, None)
    broker.kill_tree()

    broker = make_broker(root=root, offsets_record_max_bytes=RECORD_MAX)
    with broker.client(broker.tcp) as c:
        for (g, p), (offset, metadata) in acknowledged.items():
            (r,) = c.offset_fetch(g, [(topic, p)])
            assert (r.offset, r.metadata or None) == (offset, metadata), (g, p)


def test_commits_for_missing_topics_or_partitions_are_refused(make_broker, tmp_path):
    broker = make_broker()
    topic, group = new_topic(), new_topic("group")
    with broker.client() as c:
        c.create_topic(topic, 2)
        size = os.path.getsize(store_path(tmp_path))
        junk = [(new_topic("missing"), 0, 5, None), (topic, 2, 5, None), (topic, -1, 5, None),
                (topic, 1, 6, "kept")]
        results = c.offset_commit(group, junk, raise_on_error=False)
        assert [r.error_code for r in results] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 3 + [
            ErrorCode.NONE]
        fetched = c.offset_fetch(group, [(t, p) for t, p, _, _ in junk])
        assert [r.offset for r in fetched] == [-1, -1, -1, 6]
        # A request of junk keys only writes nothing at all.
        all_junk = [(new_topic("junk"), p, 1, None) for p in range(1000)]
        results = c.offset_commit(group, all_junk, raise_on_error=False)
        assert {r.error_code for r in results} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    grown = os.path.getsize(store_path(tmp_path)) - size
    assert grown < 200  # the one record of the one good entry


def test_the_store_stays_bounded_and_restarts_at_the_latest_values(make_broker, tmp_path):
    root = tmp_path / "b"
    root.mkdir()
    settings = dict(offsets_compact_min_bytes=65536, offsets_compact_ratio=4)
    topic, group = new_topic(), new_topic("group")
    broker = make_broker(root=root, **settings)
    commits, deadline = 3000, time.monotonic() + 60
    with broker.client() as c:
        c.create_topic(topic, 4)
        for i in range(commits):
            c.offset_commit(group, [(topic, i % 4, i, "m" * 100)])
            assert time.monotonic() < deadline, f"only {i} commits in 60 s"
    # About 130 bytes a record: 390 KB without compaction.
    size = os.path.getsize(store_path(root))
    assert size <= 65536 + 4096, size
    assert broker.stop() == 0

    broker = make_broker(root=root, **settings)
    with broker.client() as c:
        fetched = c.offset_fetch(group, [(topic, p) for p in range(4)])
        assert [r.offset for r in fetched] == [commits - 4 + p for p in range(4)]
        assert {r.metadata for r in fetched} == {"m" * 100}


def test_a_compaction_left_half_done_is_ignored_at_start(make_broker, tmp_path):
    root = tmp_path / "b"
    root.mkdir()
    topic, group = new_topic(), new_topic("group")
    broker = make_broker(root=root)
    with broker.client() as c:
        c.create_topic(topic, 1)
        c.offset_commit(group, [(topic, 0, 42, "kept")])
    assert broker.stop() == 0
    leftover = store_path(root) + COMPACT_SUFFIX
    with open(leftover, "wb") as f:
        f.write(b"\x00\x00\x00\x10half a compaction")

    broker = make_broker(root=root)
    assert not os.path.exists(leftover)
    with broker.client() as c:
        (r,) = c.offset_fetch(group, [(topic, 0)])
        assert (r.offset, r.metadata) == (42, "kept")
