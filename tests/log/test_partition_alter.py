"""PartitionLog.alter: a topic changed on a running broker (ALTER_TOPIC). The
change is in partition.json before it applies, a bad one writes nothing, a
count never shrinks, and the open log goes by the new config at once."""

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


def test_set_delete_and_grow_in_one_write(log):
    assert log.alter(SMALL, {"retention.bytes": " 0400 "}, ["flush.ms"], 5) is True
    assert meta(log)["partitions"] == 5
    assert meta(log)["config"] == {"retention.bytes": "400"}  # as the broker reads it
    assert log.overrides == {"retention.bytes": "400"} and log.num_partitions == 5
    assert log.config.retention_bytes == 400
    assert log.config.flush_ms == SMALL.flush_ms  # deleted: back to the default
    assert log.alter(SMALL, {"retention.bytes": "400"}) is False  # nothing changes


def test_a_smaller_count_keeps_the_larger(log):
    log.alter(SMALL, {}, (), 6)
    assert log.alter(SMALL, {"flush.ms": "70"}, (), 3) is True
    assert meta(log)["partitions"] == 6 and meta(log)["config"] == {"flush.ms": "70"}


@pytest.mark.parametrize("changes", [{"colour": "red"}, {"segment.bytes": "1"},
                                     {"retention.ms": "soon"}])
def test_a_bad_change_writes_nothing(log, changes):
    before = meta(log)
    with pytest.raises(ConfigError):
        log.alter(SMALL, changes, (), 9)
    assert meta(log) == before and log.num_partitions == 2
    assert log.overrides == {"flush.ms": "50"}


def test_the_open_log_goes_by_the_new_config(log, clock):
    log.append(message_set(1), 1)  # 100 bytes of a 200-byte segment
    log.alter(SMALL, {"segment.bytes": "64"})
    log.append(message_set(1), 1)  # the active segment is past 64 bytes: a roll first
    assert log.segment_bases == [0, 100]
    log.append(message_set(3), 3)
    log.alter(SMALL, {"retention.bytes": "150"})
    log.enforce_retention(clock())
    assert log.log_end_offset - log.log_start_offset <= 150 + 300


def test_a_reopened_log_reads_the_change(log, clock):
    log.alter(SMALL, {"max.message.bytes": "1000"}, ["flush.ms"], 4)
    log.close()
    again = PartitionLog.open(log.path, SMALL, clock)
    try:
        assert again.overrides == {"max.message.bytes": "1000"}
        assert again.num_partitions == 4 and again.config.max_message_bytes == 1000
    finally:
        again.close()
