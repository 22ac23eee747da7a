"""The consumer offsets store: what it acknowledges it replays, and it stays bounded."""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.offsetstore import (COMPACT_SUFFIX, FILENAME, OffsetRecordTooLargeError,
                                        OffsetStore)


def reopen(path, **limits) -> OffsetStore:
    return OffsetStore.open(str(path), **limits)


def test_commits_survive_reopening(tmp_path):
    store = reopen(tmp_path)
    store.commit([("g", "t", 0, 10, "m"), ("g", "t", 1, 20, None)])
    store.commit([("g", "t", 0, 11, "again")])
    store.close()
    store = reopen(tmp_path)
    assert store.fetch("g", "t", 0) == (11, "again")
    assert store.fetch("g", "t", 1) == (20, None)
    assert store.fetch("g", "t", 2) == (-1, "")
    assert store.fetch("other", "t", 0) == (-1, "")


def test_a_record_over_the_limit_is_refused_and_nothing_is_lost(tmp_path):
    store = reopen(tmp_path, record_max_bytes=1024)
    store.commit([("g", "t", 0, 1, "before")])
    with pytest.raises(OffsetRecordTooLargeError) as refused:
        store.commit([("g", "t", 1, 2, "x" * 2000)])
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    store.commit([("g", "t", 0, 3, "after")])
    size = os.path.getsize(tmp_path / FILENAME)
    store.close()
    # The largest record the limit allows replays, and so does all that follows it.
    store = reopen(tmp_path, record_max_bytes=1024)
    big = [("g", "t", p, p, "y" * 40) for p in range(15)]
    store.commit(big)
    store.commit([("g", "t", 0, 4, "last")])
    store.close()
    store = reopen(tmp_path, record_max_bytes=1024)
    assert store.fetch("g", "t", 1) == (1, "y" * 40)
    assert store.fetch("g", "t", 0) == (4, "last")
    assert os.path.getsize(tmp_path / FILENAME) > size


def test_lowering_the_limit_keeps_records_written_under_a_higher_one(tmp_path):
    store = reopen(tmp_path, record_max_bytes=1 << 20)
    store.commit([("g", "t", 0, 7, "z" * 5000)])
    store.commit([("g", "t", 1, 8, None)])
    store.close()
    store = reopen(tmp_path, record_max_bytes=1024)
    assert store.fetch("g", "t", 0) == (7, "z" * 5000)
    assert store.fetch("g", "t", 1) == (8, None)


def test_repeated_commits_stay_bounded_and_reopen_at_the_latest(tmp_path):
    limits = dict(compact_min_bytes=4096, compact_ratio=4)
    store = reopen(tmp_path, **limits)
    for i in range(3000):
        store.commit([("g", "t", i % 5, i, f"m{i}"), ("h", "u", 0, -i, None)])
    assert store.compactions > 0
    size = os.path.getsize(tmp_path / FILENAME)
    assert size <= max(4096, 4 * store.live_bytes) + 200
    store.close()
    store = reopen(tmp_path, **limits)
    for p in range(5):
        last = max(i for i in range(3000) if i % 5 == p)
        assert store.fetch("g", "t", p) == (last, f"m{last}")
    assert store.fetch("h", "u", 0) == (-2999, None)


def test_compaction_splits_into_records_within_the_limit(tmp_path):
    store = reopen(tmp_path, record_max_bytes=1024)
    for p in range(200):
        store.commit([("g", "t", p, p, "meta")])
    store.compact()
    store.close()
    data = (tmp_path / FILENAME).read_bytes()
    pos, records = 0, 0
    while pos < len(data):
        length, crc = struct.unpack_from(">iI", data, pos)
        assert length <= 1024
        assert zlib.crc32(data[pos + 8:pos + 8 + length]) == crc
        pos += 8 + length
        records += 1
    assert records > 1
    store = reopen(tmp_path, record_max_bytes=1024)
    assert [store.fetch("g", "t", p) for p in range(200)] == [(p, "meta") for p in range(200)]


def test_a_compaction_cut_short_leaves_the_store_whole(tmp_path):
    store = reopen(tmp_path)
    store.commit([("g", "t", 0, 5, "kept")])
    store.close()
    # What a crash before the rename leaves: a partial new file beside the old one.
    leftover = tmp_path / (FILENAME + COMPACT_SUFFIX)
    leftover.write_bytes(b"\x00\x00\x01\x00garbage")
    store = reopen(tmp_path)
    assert not leftover.exists()
    assert store.fetch("g", "t", 0) == (5, "kept")
    store.commit([("g", "t", 0, 6, "next")])
    store.close()
    assert reopen(tmp_path).fetch("g", "t", 0) == (6, "next")


def test_a_torn_last_record_is_cut_and_earlier_ones_kept(tmp_path):
    store = reopen(tmp_path)
    store.commit([("g", "t", 0, 1, "a")])
    store.commit([("g", "t", 0, 2, "b")])
    store.close()
    path = tmp_path / FILENAME
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])
    store = reopen(tmp_path)
    assert store.fetch("g", "t", 0) == (1, "a")
    store.commit([("g", "t", 0, 3, "c")])
    store.close()
    assert reopen(tmp_path).fetch("g", "t", 0) == (3, "c")


def test_each_group_s_topics_are_known_once_synced_and_after_replay_and_compaction(tmp_path):
    store = reopen(tmp_path)
    store.commit([("g", "b", 0, 1, None), ("g", "a", 3, 1, None), ("h", "a", 0, 1, None)])
    written = store.write([("k", "c", 0, 5, None), ("g", "c", 1, 5, None)])
    # written, not yet synced: not what fetch reads, nor what the groups list holds
    assert store.groups() == ["g", "h"] and store.topics("g") == ["a", "b"]
    store.apply(written)
    assert store.groups() == ["g", "h", "k"]
    assert store.topics("g") == ["a", "b", "c"] and store.topics("k") == ["c"]
    assert store.topics("nobody") == []
    store.commit([("g", "a", 3, 2, None)])  # a key committed again adds nothing
    assert store.topics("g") == ["a", "b", "c"]
    store.close()
    store = reopen(tmp_path)
    assert (store.groups(), store.topics("g")) == (["g", "h", "k"], ["a", "b", "c"])
    store.compact()
    store.close()
    store = reopen(tmp_path)
    assert (store.groups(), store.topics("g"), store.topics("h")) == \
        (["g", "h", "k"], ["a", "b", "c"], ["a"])
