"""dump-log on segment files written here: entries, offsets, and where validity ends."""

from __future__ import annotations

import io
import json
import random
import struct
import zlib

import pytest

from hostbroker.exits import CommandError
from hostbroker.commands.dumplog import dump, walk
from hostbroker.log.message import (
    CODEC_GZIP,
    CODEC_SNAPPY,
    encode_message,
    encode_message_set,
    scan_valid_prefix,
)
from hostbroker.log.segments import segment_filename


def _run(*paths, **options) -> tuple[int, list[dict]]:
    out = io.StringIO()
    status = dump([str(p) for p in paths], as_json=True, out=out, **options)
    return status, [json.loads(line) for line in out.getvalue().splitlines()]


def _segment(tmp_path, base: int, data: bytes):
    path = tmp_path / segment_filename(base)
    path.write_bytes(data)
    return path


def _summary(records: list[dict]) -> dict:
    (summary,) = [r for r in records if r["type"] == "summary"]
    return summary


def test_valid_segment_lists_every_entry_at_base_plus_position(tmp_path):
    payloads = [b"a", b"bb" * 10, b"", b"c" * 300]
    data = encode_message_set(payloads) + encode_message(b"old", magic=0)
    path = _segment(tmp_path, 5000, data)

    status, records = _run(path, print_payloads=True)

    assert status == 0
    entries = [r for r in records if r["type"] == "entry"]
    positions = [0]
    for payload in payloads:
        positions.append(positions[-1] + 4 + 6 + len(payload))
    assert [e["position"] for e in entries] == positions
    assert [e["offset"] for e in entries] == [5000 + p for p in positions]
    assert [e["payload"] for e in entries] == ["a", "bb" * 10, "", "c" * 300, "old"]
    assert [e["magic"] for e in entries] == [1, 1, 1, 1, 0]
    assert all(e["valid"] for e in entries)
    assert entries[0]["crc"] == f"0x{zlib.crc32(b'a'):08x}"
    summary = _summary(records)
    assert summary["valid_bytes"] == summary["size"] == len(data)
    assert summary["valid_entries"] == 5
    assert "problem" not in summary


def _corrupt(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


GOOD = encode_message_set([b"first", b"second", b"third"])
SECOND = 4 + 6 + 5  # byte position of the second entry
LAST = len(GOOD) - (4 + 6 + 5)  # and of the third


@pytest.mark.parametrize("data, problem", [
    (GOOD[:-2], "partial entry (9 of 11 bytes present)"),
    (GOOD + b"\x00\x00", "partial length field (2 bytes left)"),
    (_corrupt(GOOD, SECOND + 12, b"X"), "CRC mismatch"),
    (_corrupt(GOOD, SECOND + 4, b"\x07"), "unknown magic 7"),
    (_corrupt(GOOD, SECOND + 5, b"\x03"), "attributes 0x03 use a reserved codec or bit"),
    (_corrupt(GOOD, SECOND, struct.pack(">i", 2)), "length 2 is below the minimum"),
    (_corrupt(GOOD, SECOND, struct.pack(">i", 5)), "length 5 is too short for magic 1"),
], ids=["partial", "partial-length", "crc", "magic", "attributes", "short", "short-v1"])
def test_each_kind_of_invalid_entry_is_named_with_its_byte(tmp_path, data, problem):
    path = _segment(tmp_path, 100, data)
    status, records = _run(path)
    summary = _summary(records)
    stop = LAST if "partial entry" in problem else len(GOOD) if "field" in problem else SECOND
    assert status == 3
    assert summary["problem"].startswith(problem)
    assert summary["valid_bytes"] == stop == scan_valid_prefix(data)[0]
    assert summary["invalid_from_offset"] == 100 + stop


def test_too_large_entry_follows_max_message_bytes(tmp_path):
    path = _segment(tmp_path, 0, encode_message_set([b"x" * 100]))
    assert _run(path)[0] == 0
    status, records = _run(path, max_message_bytes=50)
    assert status == 3
    assert _summary(records)["problem"] == "length 106 exceeds the maximum of 50"


def test_walk_goes_on_past_a_bad_crc_and_stops_at_what_it_cannot_frame(tmp_path):
    data = _corrupt(GOOD, SECOND + 12, b"X") + b"\x00\x00\x00\x00junk"
    entries = list(walk(data))
    assert [e.valid for e in entries] == [True, False, True, False]
    assert entries[-1].whole is False and entries[-1].position == len(GOOD)


def test_agrees_with_recovery_on_random_garbage(tmp_path):
    rng = random.Random(7)
    base = encode_message_set([rng.randbytes(rng.randrange(0, 40)) for _ in range(30)])
    base += encode_message_set([b"z" * 20] * 5, codec=CODEC_GZIP)
    for trial in range(50):
        data = bytearray(base)
        if trial % 2:
            data += rng.randbytes(rng.randrange(1, 64))
        else:
            at = rng.randrange(len(data))
            data[at:at + 3] = rng.randbytes(3)
        path = _segment(tmp_path, 0, bytes(data))
        status, records = _run(path)  # entry by entry, through walk()
        expected_bytes, expected_count = scan_valid_prefix(bytes(data))
        summary = _summary(records)
        assert (summary["valid_bytes"], summary["valid_entries"]) == (expected_bytes, expected_count)
        assert status == (0 if expected_bytes == len(data) else 3)
        # --summary takes the library's scan for the prefix; the report is the same.
        assert _run(path, summary_only=True) == (status, [summary])


def test_deep_shows_the_messages_inside_wrappers(tmp_path):
    data = (encode_message_set([b"plain"])
            + encode_message_set([b"g1", b"g2"], codec=CODEC_GZIP)
            + encode_message_set([b"s1", b"s2", b"s3"], codec=CODEC_SNAPPY))
    path = _segment(tmp_path, 0, data)
    status, records = _run(path, deep=True, print_payloads=True)
    assert status == 0
    messages = [r for r in records if r["type"] == "message"]
    wrappers = [r for r in records if r["type"] == "entry" and r["codec"] != "none"]
    assert [m["payload"] for m in messages] == ["g1", "g2", "s1", "s2", "s3"]
    assert [m["offset"] for m in messages] == [wrappers[0]["offset"]] * 2 + [wrappers[1]["offset"]] * 3
    assert _summary(records)["messages"] == 6


def test_deep_reports_a_wrapper_that_does_not_open(tmp_path):
    # A valid CRC over bytes that are not gzip: valid for recovery, unreadable for consumers.
    data = encode_message_set([b"ok"]) + encode_message(b"not gzip at all", codec=CODEC_GZIP)
    path = _segment(tmp_path, 0, data)
    assert _run(path)[0] == 0
    status, records = _run(path, deep=True)
    assert status == 3
    (wrapper,) = [r for r in records if r["type"] == "wrapper"]
    assert "gzip payload does not decompress" in wrapper["problem"]
    summary = _summary(records)
    assert summary["unreadable_wrappers"] == 1 and "problem" not in summary


def test_partition_dir_dumps_segments_in_offset_order(tmp_path):
    first = encode_message_set([b"one", b"two"])
    _segment(tmp_path, len(first), encode_message_set([b"three"]))
    _segment(tmp_path, 0, first)
    (tmp_path / "partition.json").write_text("{}")
    status, records = _run(tmp_path)
    assert status == 0
    summaries = [r for r in records if r["type"] == "summary"]
    assert [s["base_offset"] for s in summaries] == [0, len(first)]
    assert [r["offset"] for r in records if r["type"] == "entry"] == [0, 13, len(first)]


def test_text_output_and_empty_file(tmp_path):
    path = _segment(tmp_path, 0, b"")
    out = io.StringIO()
    assert dump([str(path)], out=out) == 0
    assert out.getvalue().splitlines()[-1] == "valid: all 0 bytes, 0 valid entries"
    bad = _segment(tmp_path, 40, GOOD[:-1])
    out = io.StringIO()
    assert dump([str(bad)], out=out) == 3
    lines = out.getvalue().splitlines()
    assert lines[0] == f"dumping {bad} (base offset 40)"
    assert "valid: yes" in lines[1] and "valid: no" in lines[3]
    assert lines[-1] == (f"not valid from byte {LAST} (offset {40 + LAST}): partial entry "
                         f"(10 of 11 bytes present); 2 valid entries ({LAST} bytes) before it, "
                         "14 bytes from there")


def test_unreadable_paths_are_usage_errors(tmp_path):
    with pytest.raises(CommandError) as missing:
        dump([str(tmp_path / "nope.kafka")])
    assert missing.value.status == 2
    with pytest.raises(CommandError) as empty_dir:
        dump([str(tmp_path)])
    assert "no *.kafka segment files" in str(empty_dir.value)
