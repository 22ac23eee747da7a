"""Disk space reserved past the active segment's end (hostbroker.log.prealloc)."""

import os

from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog
from hostbroker.log.prealloc import Reservation

from .conftest import read_all

MiB = 1 << 20


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def active_segment(log: PartitionLog) -> str:
    return log.segment_path(log.segment_bases[-1])


def new_log(tmp_path, clock, segment_bytes: int = 64 * MiB) -> PartitionLog:
    """A fresh partition that reserves up to 8 MiB ahead."""
    config = LogConfig(segment_bytes=segment_bytes, preallocate_bytes=8 * MiB)
    return PartitionLog.create(str(tmp_path), "big", 0, 1, {}, config, clock)


def entries(count: int, size: int = 10 * 1024) -> bytes:
    return encode_message_set([bytes([i % 251]) * (size - 10) for i in range(count)])


def test_appends_reserve_ahead_without_changing_the_file_or_its_reads(tmp_path, clock):
    config = LogConfig(segment_bytes=64 * MiB, preallocate_bytes=8 * MiB)
    log = PartitionLog.create(str(tmp_path), "big", 0, 1, {}, config, clock)
    data = entries(100)  # ~1 MiB
    log.append(data, 100)
    path = active_segment(log)
    assert os.path.getsize(path) == len(data) == log.log_end_offset
    # reserved ahead as much as it holds, at least 1 MiB
    assert log._reservation.reserved_to == len(data) + MiB
    assert len(data) + MiB <= allocated(path) < len(data) + MiB + 64 * 1024
    for _ in range(20):
        log.append(data, 100)
    size = os.path.getsize(path)
    assert size == 21 * len(data)
    reserved = log._reservation.reserved_to
    assert size + 4 * MiB <= reserved <= size + 8 * MiB  # capped by the setting
    assert reserved <= allocated(path) < reserved + 64 * 1024
    messages = read_all(log, max_bytes=MiB)
    assert len(messages) == 2100
    assert [bytes(m.payload)[:1] for m in messages[:3]] == [b"\x00", b"\x01", b"\x02"]
    log.close()
    assert allocated(path) < size + MiB  # a clean close gives it back
    reopened = PartitionLog.open(log.path, config, clock, recover=True)
    assert reopened.log_end_offset == size
    reopened.close()


def test_a_roll_gives_back_the_old_segments_reservation(tmp_path, clock):
    log = new_log(tmp_path, clock, segment_bytes=3 * MiB)
    data = entries(100)
    log.append(data, 100)
    first = active_segment(log)
    assert allocated(first) >= len(data) + MiB
    log.append(data, 100)
    assert log._reservation.reserved_to == 3 * MiB  # never past the segment size
    assert allocated(first) < 3 * MiB + 64 * 1024
    log.append(data, 100)
    log.append(data, 100)  # past 3 MiB: rolls
    assert len(log.segment_bases) == 2
    assert os.path.getsize(first) == 3 * len(data)
    assert allocated(first) < os.path.getsize(first) + 64 * 1024
    log.close()


def test_a_crash_with_space_reserved_recovers_the_log_exactly(tmp_path, clock):
    log = new_log(tmp_path, clock)
    data = entries(50)
    log.append(data, 50)
    log.append(data, 50)
    path = active_segment(log)
    assert allocated(path) >= os.path.getsize(path) + MiB // 2
    os.close(log._fd)  # the process dies: no close, no give-back
    log._fd = None
    recovered = PartitionLog.open(log.path, log.config, clock, recover=True)
    assert recovered.log_end_offset == 2 * len(data)
    assert recovered.recovery_stats.bytes_scanned == 2 * len(data)
    assert len(read_all(recovered, max_bytes=MiB)) == 100
    recovered.append(data, 50)
    assert os.path.getsize(path) == 3 * len(data)
    recovered.close()


def test_no_reservation_when_turned_off():
    reservation = Reservation(0, 1 << 30, 0)
    reservation.after_append(-1, 10 * MiB)  # an invalid fd: never used when off
    assert reservation.reserved_to == 0


def test_a_failing_reservation_turns_itself_off_and_never_raises(tmp_path):
    reservation = Reservation(8 * MiB, 1 << 30, 0)
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT, 0o644)  # not writable: EBADF
    try:
        reservation.after_append(fd, MiB)
        assert (reservation.limit, reservation.reserved_to) == (0, 0)
        reservation.give_back(fd, 0)
    finally:
        os.close(fd)


def test_giving_back_keeps_the_segments_modification_time(tmp_path, clock):
    log = new_log(tmp_path, clock)
    log.append(entries(10), 10)
    path = active_segment(log)
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    log.close()
    assert os.stat(path).st_mtime_ns == 1_600_000_000_000_000_000
    assert allocated(path) < os.path.getsize(path) + 64 * 1024
