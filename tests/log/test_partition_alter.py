"""PartitionLog.alter: a topic changed on a running broker (ALTER_TOPIC). The
change is in partition.json before it applies, a bad one writes nothing, a
count never shrinks, a change older than the one held is not applied, the
open log goes by the new config at once, and a lowered max.message.bytes
never makes recovery cut what was stored under a larger one."""

import json
import os

import pytest

from hostbroker.errors import ConfigError
from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog

SMALL = LogConfig(segment_bytes=200, flush_messages=3, flush_ms=100)


def message_set(count: int, size: int = 100) -> bytes:
    return encode_message_set([b"m" * (size - 10)] * count)


@pytest.fixture
def log(tmp_path, clock):
    partition_log = PartitionLog.create(str(tmp_path), "events", 0, 2,
                                        {"flush.ms": "50"}, SMALL, clock)
    yield partition_log
    partition_log.close()


def meta(log) -> dict:
    with open(os.path.join(log.path, "partition.json")) as f:
        return json.load(f)


def test_the_whole_map_and_the_count_in_one_write(log):
    assert log.alter(SMALL, {"retention.bytes": " 0400 "}, 5) is True
    assert meta(log)["partitions"] == 5
    assert meta(log)["config"] == {"retention.bytes": "400"}  # as the broker reads it
    assert log.overrides == {"retention.bytes": "400"} and log.num_partitions == 5
    assert log.config.retention_bytes == 400
    assert log.config.flush_ms == SMALL.flush_ms  # not in the map: back to the default
    assert log.alter(SMALL, {"retention.bytes": "400"}) is False  # nothing changes


def test_a_smaller_count_keeps_the_larger(log):
    log.alter(SMALL, None, 6)
    assert log.alter(SMALL, {"flush.ms": "70"}, 3) is True
    assert meta(log)["partitions"] == 6 and meta(log)["config"] == {"flush.ms": "70"}


def test_a_change_older_than_the_one_held_is_not_applied(log):
    """Two changes reach partitions in either order: each keeps the newest."""
    assert log.alter(SMALL, {"retention.ms": "2000"}, None, stamp=20) is True
    assert log.alter(SMALL, {"retention.ms": "1000"}, 4, stamp=10) is True  # the count only
    assert log.overrides == {"retention.ms": "2000"} and log.stamp == 20
    assert meta(log)["config"] == {"retention.ms": "2000"} and meta(log)["stamp"] == 20
    assert meta(log)["partitions"] == 4
    assert log.alter(SMALL, {"retention.ms": "3000"}, None, stamp=20) is False  # same stamp
    assert log.alter(SMALL, {"retention.ms": "3000"}, None, stamp=21) is True
    assert log.config.retention_ms == 3000


@pytest.mark.parametrize("changes", [{"colour": "red"}, {"segment.bytes": "1"},
                                     {"retention.ms": "soon"},
                                     {"retention.ms": " " * 64 + "1"}])
def test_a_bad_change_writes_nothing(log, changes):
    before = meta(log)
    with pytest.raises(ConfigError):
        log.alter(SMALL, changes, 9)
    assert meta(log) == before and log.num_partitions == 2
    assert log.overrides == {"flush.ms": "50"}


def test_the_open_log_goes_by_the_new_config(log, clock):
    log.append(message_set(1), 1)  # 100 bytes of a 200-byte segment
    log.alter(SMALL, {"segment.bytes": "64"})
    log.append(message_set(1), 1)  # the active segment is past 64 bytes: a roll first
    assert log.segment_bases == [0, 100]
    for _ in range(3):
        log.append(message_set(1), 1)  # each 100-byte entry rolls a 64-byte segment
    assert log.segment_bases == [0, 100, 200, 300, 400]
    log.alter(SMALL, {"segment.bytes": "64", "retention.bytes": "150"})
    log.enforce_retention(clock())
    # 500 bytes in five segments; past 150 bytes the oldest go, the active one stays
    assert log.segment_bases == [400]
    assert log.log_start_offset == 400


def test_a_reopened_log_reads_the_change(log, clock):
    log.alter(SMALL, {"max.message.bytes": "1000"}, 4, stamp=7)
    log.close()
    again = PartitionLog.open(log.path, SMALL, clock)
    try:
        assert again.overrides == {"max.message.bytes": "1000"} and again.stamp == 7
        assert again.num_partitions == 4 and again.config.max_message_bytes == 1000
    finally:
        again.close()


def test_a_lowered_max_message_bytes_cuts_nothing_at_recovery(tmp_path, clock):
    """Entries stored under a larger limit stay after a crash's recovery: the
    scan checks them against the largest limit the partition ever had."""
    defaults = LogConfig()
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {}, defaults, clock)
    for _ in range(3):
        log.append(encode_message_set([b"x" * 5000]), 1)
    log.append(encode_message_set([b"y" * 100]), 1)
    end = log.log_end_offset
    assert "max_message_bytes_seen" not in meta(log)  # (written only while above the limit)
    log.alter(defaults, {"max.message.bytes": "1000"})
    assert meta(log)["max_message_bytes_seen"] == defaults.max_message_bytes
    log.close(flush=False)
    again = PartitionLog.open(log.path, defaults, clock, recover=True, recovery_point=0)
    try:
        assert again.log_end_offset == end
        assert again.config.max_message_bytes == 1000  # produces still go by it
        assert again.max_message_bytes_seen == defaults.max_message_bytes
    finally:
        again.close()


def test_the_largest_limit_ever_set_is_kept(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {"max.message.bytes": "2000"},
                              LogConfig(), clock)
    try:
        log.alter(LogConfig(), {"max.message.bytes": "9000"})
        log.append(encode_message_set([b"z" * 8000]), 1)
        log.alter(LogConfig(), {"max.message.bytes": "100"})
        assert log.max_message_bytes_seen == 9000 and meta(log)["max_message_bytes_seen"] == 9000
    finally:
        log.close()
    again = PartitionLog.open(log.path, LogConfig(), clock, recover=True, recovery_point=0)
    try:
        assert again.log_end_offset > 8000
    finally:
        again.close()
