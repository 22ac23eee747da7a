"""The fixtures of tests/logdirs/ checked on their own: tests/mounts.py fills a
real filesystem to ENOSPC and unmounts what it mounted; assert_all_acked
finds a lost or misordered acknowledged value and lets a retried duplicate
pass; and a dirs_broker with a tmpfs dir serves plain partitions on every dir,
AckedLog's acknowledged values reading back through read_back."""

from __future__ import annotations

import errno
import os

import pytest

from tests.logdirs.support import (
    AckedLog,
    _log_bytes,
    assert_all_acked,
    dir_of,
    read_back,
    replica_slots,
)
from tests.mounts import fill, mounted, tmpfs


def test_a_tmpfs_fills_to_enospc_and_is_unmounted(tmp_path):
    path = str(tmp_path / "small")
    with tmpfs(path, "1m") as small:
        assert mounted(small)
        assert os.stat(small).st_mode & 0o7777 == 0o750
        filler = fill(small)
        with pytest.raises(OSError) as e, open(os.path.join(small, "more"), "wb") as f:
            f.write(b"x" * 8192)
            f.flush()
        assert e.value.errno == errno.ENOSPC
        os.remove(filler)
        with open(os.path.join(small, "room"), "wb") as f:  # freed: room again
            f.write(b"x" * 8192)
    assert not mounted(path)
    assert os.listdir(path) == []  # the test's own dir again, nothing written to it


def test_assert_all_acked_allows_duplicates_and_finds_losses_and_disorder():
    acked = [(0, b"a"), (0, b"b"), (1, b"c")]
    assert_all_acked(acked, {0: [b"a", b"a", b"b"], 1: [b"c"]})  # a retried duplicate
    with pytest.raises(AssertionError, match="lost"):
        assert_all_acked(acked, {0: [b"a"], 1: [b"c"]})
    with pytest.raises(AssertionError, match="read before"):
        assert_all_acked(acked, {0: [b"b", b"a"], 1: [b"c"]})


def test_log_bytes_joins_segments_by_their_base_offsets(tmp_path):
    (tmp_path / f"{0:020d}.kafka").write_bytes(b"0123456789")
    (tmp_path / f"{10:020d}.kafka").write_bytes(b"abcdef")
    assert _log_bytes(str(tmp_path), 0, 16) == b"0123456789abcdef"
    assert _log_bytes(str(tmp_path), 8, 12) == b"89ab"


def test_a_dirs_broker_serves_on_each_of_its_dirs_the_tmpfs_too(dirs_broker):
    broker = dirs_broker(2, small="8m")
    assert mounted(broker.small)
    with broker.client() as c:
        c.create_topic("spread", 4)  # plain partitions, spread over the log dirs
    used = {dir_of(broker, s) for p in range(4) for _, s in replica_slots(broker, "spread", p)}
    assert used == {os.path.abspath(d) for d in broker.dirs}
    log = AckedLog(broker, "spread", 4, max_bytes=200_000)
    log.start()
    log.join(60)
    log.stop()
    assert len(log.acked) * 100 >= 200_000 and log.failed == 0
    assert_all_acked(log, read_back(broker, "spread"))
