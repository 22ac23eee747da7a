import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.config import Config
from hostbroker.errors import (ConfigError, ErrorCode, HostbrokerError, InvalidTopicError,
                               OffsetOutOfRangeError)
from hostbroker.log.segments import (MAX_FILE_NAME_BYTES, MAX_PARTITIONS_PER_TOPIC,
                                     MAX_TOPIC_NAME_LENGTH, fetch_range, locate, offsets_before,
                                     parse_partition_dirname, parse_segment_filename,
                                     partition_dirname, segment_filename, validate_topic_name)


def test_segment_filename():
    assert segment_filename(0) == "00000000000000000000.kafka"
    assert segment_filename(536870912) == "00000000000536870912.kafka"
    with pytest.raises(ValueError):
        segment_filename(-1)


@given(st.integers(0, 10**20 - 1))
@settings(deadline=None)
def test_segment_filename_round_trip(base):
    assert parse_segment_filename(segment_filename(base)) == base


@pytest.mark.parametrize("name", ["0.kafka", "00000000000000000000.log", "partition.json",
                                  "0000000000000000000a.kafka", "00000000000000000000.kafka.tmp",
                                  "100000000000000000000.kafka"])
def test_not_segment_filenames(name):
    assert parse_segment_filename(name) is None


def test_partition_dirname():
    assert partition_dirname("page_views", 3) == "page_views_3"
    assert parse_partition_dirname("page_views_3") == ("page_views", 3)
    assert parse_partition_dirname("a_b_c_12") == ("a_b_c", 12)
    assert parse_partition_dirname("t_2147483647") == ("t", 2**31 - 1)
    for name in ["topic", "topic_", "_3", "topic_x", "topic_3.deleted-17", ".lock", "..._-1",
                 "t_007", "t_00", "t_2147483648", "t_99999999999999999999", "t_\u0663"]:
        assert parse_partition_dirname(name) is None, name
    with pytest.raises(InvalidTopicError):
        partition_dirname("bad/name", 0)


def test_every_partition_dir_of_a_valid_topic_fits_a_file_name():
    longest = "t" * MAX_TOPIC_NAME_LENGTH
    validate_topic_name(longest)
    with pytest.raises(InvalidTopicError):
        validate_topic_name(longest + "t")
    assert len(partition_dirname(longest, MAX_PARTITIONS_PER_TOPIC - 1)) == MAX_FILE_NAME_BYTES
    with pytest.raises(InvalidTopicError, match="more than a file name may have"):
        partition_dirname(longest, MAX_PARTITIONS_PER_TOPIC * 10)
    # the broker allows no more partitions than that
    assert Config.build(overrides=[f"max.partitions.per.topic={MAX_PARTITIONS_PER_TOPIC}"])
    for key in ("max.partitions.per.topic", "num.partitions"):
        with pytest.raises(ConfigError, match=key):
            Config.build(overrides=[f"{key}={MAX_PARTITIONS_PER_TOPIC + 1}"])


@pytest.mark.parametrize("name", ["a", "A-z_0.9", "x" * 249, "...", ".a", "_"])
def test_valid_topic_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a\n", None])
def test_invalid_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_locate():
    bases = [0, 100, 250]
    assert [locate(bases, o) for o in [0, 99, 100, 101, 249, 250, 10**9]] == [0, 0, 1, 1, 1, 2, 2]


BASES = [1000, 1100, 1250]
END = 1300


def test_fetch_range_inside_and_across_boundaries():
    assert fetch_range(BASES, END, 1000, 30) == (0, 0, 30)
    assert fetch_range(BASES, END, 1090, 30) == (0, 90, 10)  # cut at the boundary
    assert fetch_range(BASES, END, 1100, 30) == (1, 0, 30)  # a boundary is the later segment
    assert fetch_range(BASES, END, 1240, 1000) == (1, 140, 10)
    assert fetch_range(BASES, END, 1260, 1000) == (2, 10, 40)
    assert fetch_range(BASES, END, END, 1000) == (2, 50, 0)


def test_fetch_range_errors():
    for offset in [999, 1301, -1]:
        with pytest.raises(OffsetOutOfRangeError):
            fetch_range(BASES, END, offset, 10)
    with pytest.raises(HostbrokerError) as info:
        fetch_range(BASES, END, 1000, 0)
    assert info.value.code == ErrorCode.INVALID_FETCH_SIZE


def test_fetch_range_empty_segment_at_end():
    assert fetch_range([0, 500], 500, 500, 10) == (1, 0, 0)
    assert fetch_range([0, 500], 500, 490, 100) == (0, 490, 10)


SEGS = [(0, 1000), (100, 2000), (200, 3000)]


def test_offsets_latest_and_earliest():
    assert offsets_before(SEGS, 300, 5000, -1, 10) == [300]
    assert offsets_before(SEGS, 300, 5000, -2, 10) == [0]
    assert offsets_before(SEGS, 300, 5000, -1, 0) == []


def test_offsets_before_a_time():
    assert offsets_before(SEGS, 300, 5000, 999, 10) == []
    assert offsets_before(SEGS, 300, 5000, 1000, 10) == [0]
    assert offsets_before(SEGS, 300, 5000, 2500, 10) == [100, 0]
    assert offsets_before(SEGS, 300, 5000, 4999, 10) == [200, 100, 0]
    assert offsets_before(SEGS, 300, 5000, 5000, 10) == [300, 200, 100, 0]
    assert offsets_before(SEGS, 300, 5000, 5000, 2) == [300, 200]


def test_offsets_with_empty_active_segment():
    segments = [(0, 1000), (300, 2000)]
    assert offsets_before(segments, 300, 5000, 2000, 10) == [300, 0]
    assert offsets_before(segments, 300, 5000, 6000, 10) == [300, 0]
