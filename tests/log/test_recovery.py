"""Crash recovery: whatever a crash leaves after the acknowledged data is cut off."""

import os
import random
import signal
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.log import logdir as logdir_module
from hostbroker.log import recovery as recovery_module
from hostbroker.log.config import LogConfig
from hostbroker.log.logdir import CHECKPOINT_FILE, LogDir, parse_recovery_points
from hostbroker.log.message import (CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, encode_message,
                                    encode_message_set, iter_messages, scan_valid_prefix,
                                    validate_message_set)
from hostbroker.log.partition import PartitionLog
from hostbroker.log.recovery import RecoveryStats, valid_segment_length
from hostbroker.log.segments import locate, segment_filename

from .conftest import entries, read_all, segment_files

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


def checkpointed_point(path: str, key=("t", 0)) -> int:
    """The recovery point the log dir's checkpoint holds for ``key``; 0 without one."""
    try:
        with open(os.path.join(path, CHECKPOINT_FILE), "rb") as checkpoint:
            return parse_recovery_points(checkpoint.read()).get(key, 0)
    except (FileNotFoundError, ValueError):
        return 0


def test_corruption_loop(tmp_path, clock):
    rng = random.Random(0x5EED)
    path = str(tmp_path / "logs")
    logdir = LogDir.open(path, DEFAULTS, clock)
    log = logdir.create_partition("t", 0, 1)
    acknowledged = []
    kinds = sorted(GARBAGE)
    recoveries = {"from a recovery point": 0, "of every segment": 0}
    for iteration in range(50):
        for _ in range(rng.randint(1, 6)):
            data = random_set(rng)
            base, end = log.append(data, validate_message_set(data, DEFAULTS.max_message_bytes))
            acknowledged += iter_messages(data, base)
            if rng.random() < 0.3:
                log.flush()
            if rng.random() < 0.3:
                logdir.checkpoint_recovery_points()
        valid_end = log.log_end_offset
        valid_bases = log.segment_bases
        logdir.close(clean=False)
        crash_with_garbage(log, rng, kinds[iteration % len(kinds)])
        if rng.random() < 0.2:
            with open(os.path.join(path, CHECKPOINT_FILE), "wb") as checkpoint:
                checkpoint.write(rng.choice([b"", b"0\n1\nt 0 12", rng.randbytes(40)]))
        point = checkpointed_point(path)
        assert point <= valid_end

        logdir = LogDir.open(path, DEFAULTS, clock)
        assert logdir.recovered
        log = logdir.partitions[("t", 0)]
        assert log.log_end_offset == valid_end, iteration
        assert log.segment_bases == valid_bases
        assert segment_files(log.path) == [segment_filename(b) for b in valid_bases]
        assert os.path.getsize(log.segment_path(valid_bases[-1])) == valid_end - valid_bases[-1]
        assert read_all(log) == acknowledged
        skipped = max(locate(valid_bases, point), 0)
        assert logdir.recovery_stats.segments_skipped == skipped, iteration
        assert logdir.recovery_stats.bytes_skipped == valid_bases[skipped] - valid_bases[0]
        if len(valid_bases) > 1:
            recoveries["from a recovery point" if skipped else "of every segment"] += 1
    assert len(log.segment_bases) > 10
    assert min(recoveries.values()) >= 5, recoveries
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
        patch.setattr(recovery_module, "RECOVERY_CHUNK_BYTES", chunk)
        assert valid_segment_length(str(path), max_bytes) == scan_valid_prefix(data, max_bytes)[0]


# ------------------------------------------------------------ recovery points

SEGMENTS_300 = LogConfig(segment_bytes=300)


def checkpointed_log(path: str, clock):
    """A log checkpointed at 1000, then appended to up to 1700: six segments, three trusted."""
    logdir = LogDir.open(path, SEGMENTS_300, clock)
    log = logdir.create_partition("t", 0, 1)
    for i in range(10):
        log.append(entries(1, bytes([65 + i])), 1)
    log.flush()
    assert logdir.checkpoint_recovery_points()
    for i in range(7):
        log.append(entries(1, bytes([97 + i])), 1)
    assert log.segment_bases == [0, 300, 600, 900, 1200, 1500]
    assert (log.flushed_offset, log.log_end_offset) == (1500, 1700)   # rolled at 1500
    return logdir, log


def test_recovery_scans_from_the_recovery_point(tmp_path, clock):
    path = str(tmp_path / "logs")
    logdir, log = checkpointed_log(path, clock)
    idle = logdir.create_partition("idle", 0, 1)
    expected = read_all(log)
    logdir.close(clean=False)
    with open(log.segment_path(1500), "ab") as segment:
        segment.write(torn_entry(random.Random(1)))
    torn_size = os.path.getsize(log.segment_path(1500)) - 200

    logdir = LogDir.open(path, SEGMENTS_300, clock)
    log = logdir.partitions[("t", 0)]
    assert (log.segment_bases, log.log_end_offset) == ([0, 300, 600, 900, 1200, 1500], 1700)
    assert read_all(log) == expected
    assert log.recovery_stats == RecoveryStats(partitions=1, full_scans=0, segments_scanned=3,
                                               bytes_scanned=300 + 300 + 200 + torn_size,
                                               segments_skipped=3, bytes_skipped=900)
    # The idle partition had no line (created after the checkpoint): scanned whole.
    assert logdir.partitions[("idle", 0)].recovery_stats.full_scans == 1
    assert logdir.recovery_stats.partitions == 2
    assert logdir.recovery_stats.segments_skipped == 3
    assert checkpointed_point(path) == 1700 and checkpointed_point(path, ("idle", 0)) == 0
    logdir.close()


def test_checkpointed_segments_are_not_read(tmp_path, clock):
    path = str(tmp_path / "logs")
    logdir, log = checkpointed_log(path, clock)
    logdir.close(clean=False)
    # Damage no recovery could miss if it read segment 300; and a torn tail.
    with open(log.segment_path(300), "r+b") as segment:
        segment.seek(100 + 7)
        segment.write(b"\xff")
    with open(log.segment_path(1500), "ab") as segment:
        segment.write(b"\x00" * 512)

    logdir = LogDir.open(path, SEGMENTS_300, clock)
    log = logdir.partitions[("t", 0)]
    assert (log.segment_bases, log.log_end_offset) == ([0, 300, 600, 900, 1200, 1500], 1700)
    assert os.path.getsize(log.segment_path(1500)) == 200
    assert logdir.recovery_stats.segments_skipped == 3
    logdir.close(clean=False)

    # Without the checkpoint the same damage is found, and the log cut there.
    os.unlink(os.path.join(path, CHECKPOINT_FILE))
    logdir = LogDir.open(path, SEGMENTS_300, clock)
    log = logdir.partitions[("t", 0)]
    assert (log.segment_bases, log.log_end_offset) == ([0, 300], 400)
    assert logdir.recovery_stats.full_scans == 1
    logdir.close()


@pytest.mark.parametrize("damage", ["missing", "garbled", "unreadable"])
def test_a_bad_checkpoint_recovers_everything(tmp_path, clock, monkeypatch, damage):
    path = str(tmp_path / "logs")
    logdir, log = checkpointed_log(path, clock)
    expected = read_all(log)
    logdir.close(clean=False)
    checkpoint = os.path.join(path, CHECKPOINT_FILE)
    if damage == "missing":
        os.unlink(checkpoint)
    elif damage == "garbled":
        with open(checkpoint, "r+b") as garbled:
            garbled.write(b"\x00" * 3)
    else:
        # A read error the disk would give: a fake, as there is no real way to cause one.
        real_read = logdir_module.read_file

        def failing_read(file, *args, **kwargs):
            if file == checkpoint:
                raise OSError(5, "Input/output error")
            return real_read(file, *args, **kwargs)

        monkeypatch.setattr(logdir_module, "read_file", failing_read)
    with open(log.segment_path(1500), "ab") as segment:
        segment.write(b"\x00" * 512)

    logdir = LogDir.open(path, SEGMENTS_300, clock)
    monkeypatch.undo()
    log = logdir.partitions[("t", 0)]
    assert read_all(log) == expected
    assert logdir.recovery_stats == RecoveryStats(partitions=1, full_scans=1, segments_scanned=6,
                                                  bytes_scanned=1700 + 512)
    assert checkpointed_point(path) == 1700
    logdir.close()


def test_a_stale_checkpoint_after_truncation(tmp_path, clock):
    """A truncation below the checkpointed point, then a crash before the next checkpoint."""
    path = str(tmp_path / "logs")
    logdir, log = checkpointed_log(path, clock)
    log.truncate_to(400)
    assert log.flushed_offset == 400 and log.segment_bases == [0, 300]
    for i in range(17):
        log.append(encode_message_set([bytes([48 + i]) * 50]), 1)   # 60 bytes each
    assert log.segment_bases == [0, 300, 580, 880, 1180]
    expected = read_all(log)
    logdir.close(clean=False)
    with open(log.segment_path(1180), "ab") as segment:
        segment.write(b"\x00" * 512)

    logdir = LogDir.open(path, SEGMENTS_300, clock)
    log = logdir.partitions[("t", 0)]
    # Still 1000 on record: the scan starts at 880. Segments 300 and 580 hold
    # data that was not flushed at 1000, but rolling synced them.
    assert logdir.recovery_stats.segments_skipped == 3
    assert (log.log_end_offset, read_all(log)) == (1420, expected)
    logdir.close()


def test_a_killed_writer(tmp_path, clock):
    path = str(tmp_path / "logs")
    pid = os.fork()
    if pid == 0:
        try:
            checkpointed_log(path, clock)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

    logdir = LogDir.open(path, SEGMENTS_300, clock)
    log = logdir.partitions[("t", 0)]
    assert logdir.recovered and logdir.recovery_stats.segments_skipped == 3
    assert log.log_end_offset == 1700 == log.flushed_offset
    assert [m.payload[:1] for m in read_all(log)] == [bytes([c]) for c in b"ABCDEFGHIJabcdefg"]
    logdir.close()


def split_entries(data: bytes, base: int) -> list[tuple[int, list]]:
    """(end offset, its messages) of every entry of a message set appended at ``base``."""
    out, position = [], 0
    while position < len(data):
        end = position + 4 + struct.unpack_from(">i", data, position)[0]
        out.append((base + end, list(iter_messages(data[position:end], base + position))))
        position = end
    return out


def test_clean_shutdown_tail_loop(tmp_path, clock, monkeypatch):
    """After a clean shutdown the last segment's tail is checked, whatever was done to it."""
    rng = random.Random(0xC1EA)
    scans = []
    real_scan = recovery_module.valid_segment_length
    monkeypatch.setattr(recovery_module, "valid_segment_length",
                        lambda *args: scans.append(args) or real_scan(*args))
    path = str(tmp_path / "logs")
    logdir = LogDir.open(path, DEFAULTS, clock)
    log = logdir.create_partition("t", 0, 1)
    entries_so_far: list[tuple[int, list]] = []
    kinds = sorted(GARBAGE)
    damages = ["cut mid-entry", "garbage appended", "cut and garbage appended", "untouched"]
    for iteration in range(60):
        for _ in range(rng.randint(1, 6)):
            data = random_set(rng)
            base, _ = log.append(data, validate_message_set(data, DEFAULTS.max_message_bytes))
            entries_so_far += split_entries(data, base)
        logdir.close()
        active_base = log.segment_bases[-1]
        active = log.segment_path(active_base)
        damage = damages[iteration % len(damages)]
        end = log.log_end_offset
        if damage.startswith("cut"):
            end = rng.randint(active_base + 1, log.log_end_offset - 1)
            with open(active, "r+b") as segment:
                segment.truncate(end - active_base)
        if "garbage" in damage:
            garbage = GARBAGE[kinds[iteration % len(kinds)]](rng)
            if damage.startswith("cut"):
                # Shorter than recorded: the whole last segment is read. (A file cut and
                # grown past the recorded end again is read from that end only.)
                garbage = garbage[:log.log_end_offset - end - 1]
            with open(active, "ab") as segment:
                segment.write(garbage)
        lost_checkpoint = rng.random() < 0.2
        if lost_checkpoint:
            os.unlink(os.path.join(path, CHECKPOINT_FILE))
        entries_so_far = [(e, messages) for e, messages in entries_so_far if e <= end]
        valid_end = entries_so_far[-1][0] if entries_so_far else 0
        scans.clear()

        logdir = LogDir.open(path, DEFAULTS, clock)
        assert not logdir.recovered and logdir.offline == {}
        log = logdir.partitions[("t", 0)]
        assert log.log_end_offset == max(valid_end, active_base), (iteration, damage)
        assert os.path.getsize(active) == log.log_end_offset - active_base
        assert read_all(log) == [m for _, messages in entries_so_far for m in messages]
        if damage == "untouched" and not lost_checkpoint:
            assert scans == []  # a last segment as long as recorded is not read
        else:
            assert [os.path.basename(args[0]) for args in scans] == [segment_filename(active_base)]
    assert len(log.segment_bases) > 5
    logdir.close()


def test_a_clean_start_reads_only_what_follows_the_recorded_end(tmp_path, clock, monkeypatch):
    path = str(tmp_path / "logs")
    logdir = LogDir.open(path, DEFAULTS, clock)
    log = logdir.create_partition("t", 0, 1)
    log.append(entries(20), 20)
    logdir.close()
    with open(log.segment_path(0), "ab") as segment:
        segment.write(torn_entry(random.Random(7)))
    starts = []
    real_scan = recovery_module.valid_segment_length
    monkeypatch.setattr(recovery_module, "valid_segment_length",
                        lambda path, size, start=0: starts.append(start) or real_scan(path, size,
                                                                                         start))
    logdir = LogDir.open(path, DEFAULTS, clock)
    assert starts == [2000]
    assert logdir.partitions[("t", 0)].log_end_offset == 2000
    logdir.close()
