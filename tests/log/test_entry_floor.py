"""PartitionLog.entry_floor: where a follower may cut its log (docs/storage.md,
"Replicas"): the last entry boundary at or below an offset a leader named."""

import pytest

from hostbroker.errors import OffsetOutOfRangeError
from hostbroker.log.config import LogConfig
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog

# segments of about 300 bytes: a few entries each, so boundaries cross segments
SMALL = LogConfig(segment_bytes=300, flush_messages=1000, flush_ms=100000)


@pytest.fixture
def log(tmp_path, clock):
    partition_log = PartitionLog.create(str(tmp_path), "floor", 0, 1, {}, SMALL, clock)
    yield partition_log
    partition_log.close()


def test_every_offset_floors_to_the_entry_that_holds_it(log):
    bounds = [0]
    for size in (30, 150, 7, 200, 64, 1, 90):
        data = encode_message_set([b"p" * size])
        base, end = log.append(data, 1)
        assert base == bounds[-1]
        bounds.append(end)
    assert len(log.segment_bases) > 1
    for offset in range(0, bounds[-1] + 3):
        want = max(b for b in bounds if b <= offset)
        assert log.entry_floor(offset) == want, offset


def test_below_the_log_start_is_refused(log):
    log.append(encode_message_set([b"x"]), 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.entry_floor(-1)
