import json
import os

import pytest

from hostbroker.errors import (ConfigError, ErrorCode, HostbrokerError, InvalidTopicError,
                               OffsetOutOfRangeError, StorageError)
from hostbroker.log import partition as partition_module
from hostbroker.log.config import LogConfig
from hostbroker.log.message import CODEC_GZIP, encode_message_set, iter_messages
from hostbroker.log.partition import PartitionLog, SegmentDeleteError
from hostbroker.log.recovery import RecoveryStats
from hostbroker.log.segments import segment_filename

from .conftest import read_all, read_range, segment_files

SMALL = LogConfig(segment_bytes=200, flush_messages=3, flush_ms=100)


def message_set(count: int, size: int = 100, tag: bytes = b"m") -> bytes:
    """``count`` entries of exactly ``size`` bytes each."""
    return encode_message_set([tag * (size - 10)] * count)


@pytest.fixture
def log(tmp_path, clock):
    partition_log = PartitionLog.create(str(tmp_path), "events", 0, 2, {}, SMALL, clock)
    yield partition_log
    partition_log.close()


def reopen(log, clock, recover=True, defaults=SMALL):
    log.close()
    return PartitionLog.open(log.path, defaults, clock, recover=recover)


# ------------------------------------------------------------------ creation

def test_create_lays_out_the_dir(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "events", 1, 4, {"retention.bytes": "5000"},
                              SMALL, clock)
    assert log.path == str(tmp_path / "events_1")
    assert sorted(os.listdir(log.path)) == ["00000000000000000000.kafka", "partition.json"]
    with open(tmp_path / "events_1" / "partition.json") as meta:
        assert json.load(meta) == {"topic": "events", "partition": 1, "partitions": 4,
                                   "config": {"retention.bytes": "5000"}}
    assert (log.topic, log.partition, log.num_partitions) == ("events", 1, 4)
    assert log.config == LogConfig(segment_bytes=200, flush_messages=3, flush_ms=100,
                                   retention_bytes=5000)
    assert (log.log_start_offset, log.log_end_offset, log.segment_bases) == (0, 0, [0])
    log.close()


def test_create_rejects_bad_input_before_writing(tmp_path, clock):
    with pytest.raises(ConfigError, match="flush.ms"):
        PartitionLog.create(str(tmp_path), "events", 0, 1, {"flush.ms": "soon"}, SMALL, clock)
    with pytest.raises(InvalidTopicError):
        PartitionLog.create(str(tmp_path), "bad topic", 0, 1, {}, SMALL, clock)
    with pytest.raises(ValueError):
        PartitionLog.create(str(tmp_path), "events", 1, 1, {}, SMALL, clock)
    assert os.listdir(tmp_path) == []


def test_create_twice(tmp_path, log, clock):
    with pytest.raises(HostbrokerError) as info:
        PartitionLog.create(str(tmp_path), "events", 0, 2, {}, SMALL, clock)
    assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_config_persists_and_follows_new_defaults(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"flush.ms": "77"}, SMALL, clock)
    log.close()
    reopened = PartitionLog.open(log.path, LogConfig(flush_messages=9), clock)
    assert reopened.config == LogConfig(flush_messages=9, flush_ms=77)
    assert reopened.overrides == {"flush.ms": "77"}
    reopened.close()


def test_open_without_partition_file(tmp_path, clock):
    os.mkdir(tmp_path / "t_0")
    with pytest.raises(StorageError, match="partition.json"):
        PartitionLog.open(str(tmp_path / "t_0"), SMALL, clock)
    (tmp_path / "t_0" / "partition.json").write_text("{not json")
    with pytest.raises(StorageError, match="partition.json"):
        PartitionLog.open(str(tmp_path / "t_0"), SMALL, clock)


def test_open_creates_a_missing_first_segment(log, clock):
    log.close()
    os.unlink(os.path.join(log.path, segment_filename(0)))
    reopened = PartitionLog.open(log.path, SMALL, clock)
    assert reopened.segment_bases == [0] and reopened.log_end_offset == 0
    reopened.close()


# -------------------------------------------------------------------- append

def test_append_returns_offsets(log):
    assert log.append(message_set(1), 1) == (0, 100)
    assert log.append(memoryview(message_set(1)), 1) == (100, 200)
    assert log.append(bytearray(), 0) == (200, 200)
    assert [m.offset for m in read_all(log)] == [0, 100]


def test_roll_at_segment_bytes(log):
    log.append(message_set(1), 1)
    log.append(message_set(1), 1)          # exactly 200: still fits
    log.append(message_set(1), 1)          # 300 > 200: rolls at 200
    assert log.segment_bases == [0, 200]
    log.append(message_set(1, size=60), 1)
    log.append(message_set(1, size=60), 1)  # 100 + 60 + 60 > 200: rolls at 360
    assert log.segment_bases == [0, 200, 360]
    assert [os.path.getsize(log.segment_path(b)) for b in log.segment_bases] == [200, 160, 60]
    assert segment_files(log.path) == [segment_filename(b) for b in [0, 200, 360]]


def test_oversized_set_goes_whole_into_a_fresh_segment(log):
    log.append(message_set(5), 5)          # 500 bytes into the empty first segment
    assert log.segment_bases == [0]
    log.append(message_set(1), 1)
    log.append(message_set(4), 4)
    assert log.segment_bases == [0, 500, 600]
    assert log.log_end_offset == 1000
    assert len(read_all(log)) == 10


def test_reads_across_segment_boundaries(log):
    for i in range(12):
        log.append(message_set(1, size=70, tag=bytes([65 + i])), 1)
    assert len(log.segment_bases) > 3
    assert [m.payload[:1] for m in read_all(log)] == [bytes([65 + i]) for i in range(12)]
    for max_bytes in [70, 100, 1000]:
        assert len(read_all(log, max_bytes)) == 12
    # A fetch is cut at the end of its segment, on an entry boundary.
    second = log.segment_bases[1]
    data = read_range(log, second - 70, 1000)
    assert len(data) == 70


def test_fetch_cut_mid_entry_gives_a_partial_tail(log):
    log.append(message_set(2), 2)
    data = read_range(log, 0, 150)
    assert len(data) == 150
    assert [m.offset for m in iter_messages(data, 0)] == [0]


def test_reopen_keeps_offsets(log, clock):
    for _ in range(5):
        log.append(message_set(1, size=90), 1)
    before = (log.segment_bases, log.log_end_offset, read_all(log))
    for recover in (False, True):
        log = reopen(log, clock, recover)
        assert (log.segment_bases, log.log_end_offset, read_all(log)) == before
    assert log.append(message_set(1), 1) == (450, 550)
    log.close()


def test_append_after_close(log):
    log.close()
    with pytest.raises(StorageError, match="closed"):
        log.append(message_set(1), 1)


def test_failed_write_is_cut_off(log, monkeypatch):
    log.append(message_set(1), 1)
    real_write = os.write

    def short_then_fail(fd, data):
        if len(data) > 30:
            return real_write(fd, data[:30])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(partition_module.os, "write", short_then_fail)
    with pytest.raises(StorageError, match="No space left"):
        log.append(message_set(1), 1)
    monkeypatch.undo()
    assert log.log_end_offset == 100
    assert os.path.getsize(log.segment_path(0)) == 100
    assert log.append(message_set(1), 1) == (100, 200)


def test_short_writes_are_continued(log, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(partition_module.os, "write", lambda fd, data: real_write(fd, data[:7]))
    log.append(encode_message_set([b"x" * 50, b"y" * 20], codec=CODEC_GZIP), 1)
    monkeypatch.undo()
    assert [m.payload for m in read_all(log)] == [b"x" * 50, b"y" * 20]


# --------------------------------------------------------------------- flush

@pytest.fixture
def syncs(monkeypatch):
    """Record the files each fdatasync call made durable, as (name, size)."""
    calls = []
    real = os.fdatasync

    def record(fd):
        calls.append((os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), os.fstat(fd).st_size))
        real(fd)

    monkeypatch.setattr(partition_module.os, "fdatasync", record)
    return calls


def test_flush_by_time(log, clock, syncs):
    assert log.next_flush_deadline_ms() is None and not log.flush_due(clock())
    log.append(message_set(1), 1)
    assert log.flushed_offset == 0
    assert log.next_flush_deadline_ms() == clock() + 100
    clock.advance(99)
    log.append(message_set(1), 1)
    assert not log.flush_due(clock())
    clock.advance(1)
    assert log.flush_due(clock())
    assert log.flush() == 200 == log.flushed_offset
    assert syncs == [(segment_filename(0), 200)]
    assert log.next_flush_deadline_ms() is None and not log.flush_due(clock() + 10**6)
    log.flush()
    assert len(syncs) == 1  # nothing new: no sync


def test_flush_by_message_count(log, clock):
    log.append(message_set(1, size=40), 1)
    assert not log.flush_due(clock())
    log.append(message_set(2, size=40), 2)
    assert log.unflushed_messages == 3 and log.flush_due(clock())
    log.flush()
    assert log.unflushed_messages == 0 and not log.flush_due(clock())


def test_roll_syncs_the_old_segment(log, syncs):
    log.append(message_set(2), 2)
    log.append(message_set(1), 1)
    assert syncs == [(segment_filename(0), 200)]
    assert log.flushed_offset == 200 and log.unflushed_messages == 1
    log.flush()
    assert syncs[-1] == (segment_filename(200), 100)
    assert log.flushed_offset == 300


def test_close_flushes(log, syncs):
    log.append(message_set(1), 1)
    log.close()
    assert syncs == [(segment_filename(0), 100)]
    log.close()


# ------------------------------------------------------------ recovery point

def four_segments(log, clock):
    """Fill 0, 200, 400 and 600 up to 700 and close without a flush, as a crash would."""
    fill(log, 3)
    log.append(message_set(1), 1)
    log.close(flush=False)
    return log.path


@pytest.mark.parametrize("point, skipped", [(0, 0), (199, 0), (200, 1), (599, 2), (600, 3),
                                            (700, 3), (701, 0)])
def test_recovery_starts_at_the_segment_holding_the_point(log, clock, point, skipped):
    path = four_segments(log, clock)
    log = PartitionLog.open(path, SMALL, clock, recover=True, recovery_point=point)
    assert log.recovery_stats.segments_skipped == skipped
    assert log.recovery_stats.segments_scanned == 4 - skipped
    assert log.recovery_stats.bytes_skipped == 200 * skipped
    assert log.recovery_stats.full_scans == (skipped == 0)
    assert (log.log_end_offset, log.flushed_offset) == (700, 700)
    log.close()


def test_recovery_point_is_ignored_without_recover(log, clock):
    path = four_segments(log, clock)
    log = PartitionLog.open(path, SMALL, clock, recover=False, recovery_point=400)
    assert log.recovery_stats == RecoveryStats()
    log.close()
    with pytest.raises(ValueError, match="negative"):
        PartitionLog.open(path, SMALL, clock, recovery_point=-1)


def test_recovery_point_below_the_log_start(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"retention.bytes": "250"}, SMALL, clock)
    fill(log, 3)
    assert log.enforce_retention(clock()) == [0, 200]
    log.close(flush=False)
    log = PartitionLog.open(log.path, SMALL, clock, recover=True, recovery_point=100)
    assert log.recovery_stats.segments_scanned == 1 and log.segment_bases == [400]
    log.close()


def test_lost_files_mean_a_scan_of_everything(log, clock):
    path = four_segments(log, clock)
    os.truncate(os.path.join(path, segment_filename(200)), 150)  # sizes no longer line up
    log = PartitionLog.open(path, SMALL, clock, recover=True, recovery_point=600)
    assert log.recovery_stats.full_scans == 1
    assert (log.segment_bases, log.log_end_offset) == ([0, 200], 300)
    log.close()


def test_recovery_syncs_what_it_scanned(log, clock, syncs):
    path = four_segments(log, clock)
    with open(os.path.join(path, segment_filename(600)), "ab") as segment:
        segment.write(b"\x00" * 30)
    del syncs[:]
    log = PartitionLog.open(path, SMALL, clock, recover=True, recovery_point=450)
    # 400 is synced; 600 was cut, and truncation syncs on its own.
    assert syncs == [(segment_filename(400), 200)]
    assert log.flushed_offset == log.log_end_offset == 700
    log.close()


# ----------------------------------------------------------------- retention

def set_mtime(log, base, ms):
    os.utime(log.segment_path(base), ns=(ms * 1_000_000, ms * 1_000_000))


def fill(log, sets: int) -> None:
    for _ in range(sets):
        log.append(message_set(2), 2)  # 200 bytes: one full segment each


def test_retention_by_time(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"retention.ms": "1000"}, SMALL, clock)
    fill(log, 4)
    assert log.segment_bases == [0, 200, 400, 600]
    now = clock()
    for base, age in zip(log.segment_bases, [5000, 1001, 1000, 10]):
        set_mtime(log, base, now - age)
    assert log.segment_mtimes()[0] == (0, now - 5000)
    assert log.enforce_retention(now) == [0, 200]
    assert log.segment_bases == [400, 600] and log.log_start_offset == 400
    assert segment_files(log.path) == [segment_filename(400), segment_filename(600)]
    assert log.enforce_retention(now) == []
    assert [m.offset for m in read_all(log)] == [400, 500, 600, 700]
    log.close()


def test_retention_takes_only_the_oldest_run(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"retention.ms": "1000"}, SMALL, clock)
    fill(log, 3)
    now = clock()
    for base, age in zip(log.segment_bases, [10, 5000, 5000]):
        set_mtime(log, base, now - age)
    assert log.enforce_retention(now) == []
    log.close()


def test_all_expired_rolls_first(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"retention.ms": "1000"}, SMALL, clock)
    fill(log, 3)
    for base in log.segment_bases:
        set_mtime(log, base, clock() - 2000)
    assert log.enforce_retention(clock()) == [0, 200, 400]
    assert log.segment_bases == [600]
    assert (log.log_start_offset, log.log_end_offset) == (600, 600)
    assert os.path.getsize(log.segment_path(600)) == 0
    assert log.append(message_set(1), 1) == (600, 700)
    # An empty active segment that expired is left alone.
    log.close()
    log = PartitionLog.open(log.path, SMALL, clock)
    log.truncate_to(600)
    set_mtime(log, 600, clock() - 2000)
    assert log.enforce_retention(clock()) == []
    assert log.segment_bases == [600]
    log.close()


def test_a_segment_retention_cannot_delete_stops_it_there(tmp_path, clock, immutable):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"retention.bytes": "0"}, SMALL, clock)
    fill(log, 4)
    assert log.segment_bases == [0, 200, 400, 600]
    immutable(log.segment_path(400))
    with pytest.raises(SegmentDeleteError, match=f"{segment_filename(400)}: Operation not"):
        log.enforce_retention(clock())
    assert log.segment_bases == [400, 600] and log.log_start_offset == 400
    assert segment_files(log.path) == [segment_filename(400), segment_filename(600)]
    assert [m.offset for m in read_all(log)] == [400, 500, 600, 700]
    assert log.append(message_set(1), 1) == (800, 900)
    immutable.clear(log.segment_path(400))
    assert log.enforce_retention(clock()) == [400, 600]
    assert log.segment_bases == [800]
    log.close()


def test_retention_by_size(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"retention.bytes": "450"}, SMALL, clock)
    fill(log, 3)
    log.append(message_set(1), 1)
    assert log.segment_bases == [0, 200, 400, 600]  # 700 bytes
    assert log.enforce_retention(clock()) == [0, 200]  # 500 > 450 still, so 300 remain
    assert log.segment_bases == [400, 600]
    assert log.enforce_retention(clock()) == []
    log.close()


def test_size_retention_never_deletes_the_active_segment(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"retention.bytes": "0"}, SMALL, clock)
    log.append(message_set(5), 5)
    assert log.enforce_retention(clock()) == []
    fill(log, 1)
    assert log.enforce_retention(clock()) == [0]
    assert log.segment_bases == [500] and log.log_end_offset == 700
    log.close()


def test_unlimited_retention(log, clock):
    fill(log, 3)
    log = reopen(log, clock, defaults=LogConfig(segment_bytes=200, retention_ms=-1))
    for base in log.segment_bases:
        set_mtime(log, base, 0)
    assert log.enforce_retention(clock()) == []
    log.close()


# ---------------------------------------------------------- truncate, delete

def test_truncate_within_a_segment(log, clock):
    fill(log, 2)
    log.append(message_set(1), 1)
    log.truncate_to(300)
    assert log.log_end_offset == 300 and log.segment_bases == [0, 200]
    assert os.path.getsize(log.segment_path(200)) == 100
    log.truncate_to(250)
    assert os.path.getsize(log.segment_path(200)) == 50
    assert log.flushed_offset == 250
    log.truncate_to(250)


def test_truncate_at_a_boundary_removes_later_segments(log, clock):
    fill(log, 3)
    log.truncate_to(200)
    assert log.segment_bases == [0, 200] and log.log_end_offset == 200
    assert segment_files(log.path) == [segment_filename(0), segment_filename(200)]
    assert log.append(message_set(1), 1) == (200, 300)
    log = reopen(log, clock)
    assert log.log_end_offset == 300 and len(read_all(log)) == 3
    log.close()


def test_truncate_out_of_range(log):
    log.append(message_set(1), 1)
    for offset in [-1, 101]:
        with pytest.raises(OffsetOutOfRangeError):
            log.truncate_to(offset)


def test_delete(tmp_path, log):
    log.append(message_set(1), 1)
    log.delete(str(tmp_path / ".trash"))
    assert os.listdir(tmp_path) == [".trash"]
    assert os.listdir(tmp_path / ".trash") == []
    assert log.closed
