"""Crash recovery: whatever a crash leaves after the acknowledged data is cut off."""

import os
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.log import partition as partition_module
from hostbroker.log.config import LogConfig
from hostbroker.log.logdir import LogDir
from hostbroker.log.message import (CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, encode_message,
                                    encode_message_set, iter_messages, scan_valid_prefix,
                                    validate_message_set)
from hostbroker.log.partition import PartitionLog, valid_segment_length
from hostbroker.log.segments import segment_filename

from .conftest import read_all, segment_files

DEFAULTS = LogConfig(segment_bytes=3000, max_message_bytes=2000)


def random_set(rng: random.Random) -> bytes:
    payloads = [rng.randbytes(rng.randint(0, 150)) for _ in range(rng.randint(1, 12))]
    return encode_message_set(payloads, codec=rng.choice([CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY]))


def torn_entry(rng: random.Random) -> bytes:
    entry = encode_message(rng.randbytes(rng.randint(1, 300)))
    return entry[:rng.randint(1, len(entry) - 1)]


def bad_crc_entry(rng: random.Random) -> bytes:
    entry = bytearray(encode_message(rng.randbytes(rng.randint(1, 300))))
    entry[6] ^= 0x01
    # Valid entries after the bad one must go too.
    return bytes(entry) + random_set(rng)


GARBAGE = {
    "random bytes": lambda rng: rng.randbytes(rng.randint(1, 500)),
    "torn final entry": torn_entry,
    "zero-filled block": lambda rng: b"\x00" * rng.choice([512, 4096]),
    "bad crc": bad_crc_entry,
    "huge length": lambda rng: struct.pack(">i", 2**31 - 1) + rng.randbytes(20),
}


def crash_with_garbage(log, rng: random.Random, kind: str) -> None:
    """Leave what a crash could: garbage after the valid data, maybe a later segment."""
    active = log.segment_path(log.segment_bases[-1])
    with open(active, "ab") as segment:
        segment.write(GARBAGE[kind](rng))
    if rng.random() < 0.4:
        # A later segment full of valid entries, after a corrupted one.
        later = log.segment_bases[-1] + os.path.getsize(active)
        with open(log.segment_path(later), "wb") as segment:
            segment.write(random_set(rng))


def test_corruption_loop(tmp_path, clock):
    rng = random.Random(0x5EED)
    path = str(tmp_path / "logs")
    logdir = LogDir.open(path, DEFAULTS, clock)
    log = logdir.create_partition("t", 0, 1)
    acknowledged = []
    kinds = sorted(GARBAGE)
    for iteration in range(50):
        for _ in range(rng.randint(1, 6)):
            data = random_set(rng)
            base, end = log.append(data, validate_message_set(data, DEFAULTS.max_message_bytes))
            acknowledged += iter_messages(data, base)
        valid_end = log.log_end_offset
        valid_bases = log.segment_bases
        logdir.close(clean=False)
        crash_with_garbage(log, rng, kinds[iteration % len(kinds)])

        logdir = LogDir.open(path, DEFAULTS, clock)
        assert logdir.recovered
        log = logdir.partitions[("t", 0)]
        assert log.log_end_offset == valid_end, iteration
        assert log.segment_bases == valid_bases
        assert segment_files(log.path) == [segment_filename(b) for b in valid_bases]
        assert os.path.getsize(log.segment_path(valid_bases[-1])) == valid_end - valid_bases[-1]
        assert read_all(log) == acknowledged
    assert len(log.segment_bases) > 10
    logdir.close()


def test_damage_in_an_earlier_segment_cuts_there(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {}, LogConfig(segment_bytes=300), clock)
    for _ in range(10):
        log.append(encode_message_set([b"x" * 90]), 1)
    assert log.segment_bases == [0, 300, 600, 900]
    log.close()
    with open(log.segment_path(300), "r+b") as segment:
        segment.seek(100 + 12)
        segment.write(b"!")
    log = PartitionLog.open(log.path, LogConfig(), clock, recover=True)
    assert (log.segment_bases, log.log_end_offset) == ([0, 300], 400)
    assert segment_files(log.path) == [segment_filename(0), segment_filename(300)]
    log.close()


def test_missing_tail_of_an_earlier_segment(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {}, LogConfig(segment_bytes=300), clock)
    for _ in range(6):
        log.append(encode_message_set([b"x" * 90]), 1)
    log.close()
    os.truncate(log.segment_path(0), 200)
    # Sizes no longer line up with base offsets: even a clean open recovers.
    log = PartitionLog.open(log.path, LogConfig(), clock, recover=False)
    assert (log.segment_bases, log.log_end_offset) == ([0], 200)
    log.close()


def test_everything_invalid_leaves_an_empty_log(tmp_path, clock):
    log = PartitionLog.create(str(tmp_path), "t", 0, 1, {}, LogConfig(), clock)
    log.close()
    with open(log.segment_path(0), "wb") as segment:
        segment.write(b"\xff" * 100)
    log = PartitionLog.open(log.path, LogConfig(), clock, recover=True)
    assert (log.segment_bases, log.log_end_offset) == ([0], 0)
    log.close()


@given(st.lists(st.binary(max_size=120), max_size=30), st.binary(max_size=200),
       st.integers(0, 300))
@settings(max_examples=60, deadline=None)
def test_chunked_scan_matches_a_whole_scan(tmp_path_factory, payloads, tail, chunk):
    path = tmp_path_factory.mktemp("scan") / "segment"
    data = encode_message_set(payloads) + tail
    path.write_bytes(data)
    max_bytes = 200
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partition_module, "RECOVERY_CHUNK_BYTES", chunk)
        assert valid_segment_length(str(path), max_bytes) == scan_valid_prefix(data, max_bytes)[0]
