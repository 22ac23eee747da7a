"""The run fast paths of hostbroker.log.message give what the per-entry walk gives.

validate_message_set, scan_valid_prefix, count_entries and iter_messages take
runs of equal-length plain v1 entries in bulk. The references below walk entry
by entry with the module's careful parser (`_parse_entry`, which the per-entry
loops fall back to and which words every error), so any difference in count,
byte length, messages, or exception type and message is a fast-path bug.
"""

import gzip
import random
import struct

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.errors import HostbrokerError, InvalidMessageError, MessageTooLargeError
from hostbroker.log import message
from hostbroker.log.message import (CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, DEFAULT_MAX_MESSAGE_BYTES,
                                    Message, count_entries, encode_message, encode_message_set,
                                    iter_messages, scan_valid_prefix, validate_message_set)

# ---------------------------------------------------------------- references


def ref_walk(buf, max_message_bytes: int, strict: bool) -> tuple[int, int]:
    view = memoryview(bytes(buf))
    size = len(view)
    pos = count = 0
    while pos < size:
        try:
            parsed = message._parse_entry(view, pos, size, max_message_bytes, True)
        except HostbrokerError:
            if strict:
                raise
            return pos, count
        if parsed is None:
            if strict:
                raise InvalidMessageError(
                    f"entry at byte {pos}: partial entry ({size - pos} bytes left in the set)")
            return pos, count
        pos = parsed[0]
        count += 1
    return pos, count


def ref_count_entries(buf) -> tuple[int, int]:
    data = bytes(buf)
    pos = count = 0
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        if length < 5 or pos + 4 + length > len(data):
            break
        pos += 4 + length
        count += 1
    return count, pos


def ref_iter_messages(buf, base_offset: int, check_crc: bool, max_message_bytes: int):
    data = bytes(buf)
    pos = 0
    while True:
        parsed = message._parse_entry(data, pos, len(data), max_message_bytes, check_crc, base_offset)
        if parsed is None:
            return
        end, magic, codec, start = parsed
        offset = base_offset + pos
        if codec == CODEC_NONE:
            yield Message(offset, base_offset + end, data[start:end], codec, magic)
        else:
            inner = message._decompress(codec, data[start:end], offset)
            yield from message._inner_messages(inner, offset, base_offset + end, codec, check_crc)
        pos = end


def outcome(call):
    """What a call returned or raised, comparable with ==."""
    try:
        return "returned", call()
    except HostbrokerError as exc:
        return "raised", type(exc), str(exc)


def iter_outcome(iterator):
    """Every message an iterator yields, then how it ended."""
    got = []
    try:
        for m in iterator:
            got.append(tuple(m))
            assert type(m) is Message
    except HostbrokerError as exc:
        return got, type(exc), str(exc)
    return got, None, None


def assert_same_as_reference(buf, max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES, base_offset=0):
    assert outcome(lambda: validate_message_set(buf, max_message_bytes)) == \
        outcome(lambda: ref_walk(buf, max_message_bytes, True)[1])
    assert scan_valid_prefix(buf, max_message_bytes) == ref_walk(buf, max_message_bytes, False)
    assert count_entries(buf) == ref_count_entries(buf)
    for check_crc in (True, False):
        assert iter_outcome(iter_messages(buf, base_offset, check_crc=check_crc,
                                          max_message_bytes=max_message_bytes)) == \
            iter_outcome(ref_iter_messages(buf, base_offset, check_crc, max_message_bytes))


# ------------------------------------------------------------- message sets


def run_of(count: int, payload_size: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [encode_message(rnd.randbytes(payload_size)) for _ in range(count)]


def wrapper_entry(payloads: list[bytes], codec: int) -> bytes:
    inner = encode_message_set(payloads)
    compressed = gzip.compress(inner) if codec == CODEC_GZIP else snappy.compress(inner)
    return encode_message(compressed, codec=codec)


# A run of equal-length plain v1 entries: mostly short, sometimes past a whole
# run of 256 or two; payloads from empty to past the bulk bounds.
runs = st.builds(run_of,
                 st.one_of(st.integers(1, 12), st.integers(13, 70), st.integers(250, 600)),
                 st.one_of(st.integers(0, 40), st.integers(80, 130), st.sampled_from([4090, 4091, 4200])),
                 st.integers(0, 2**32))
piece = st.one_of(
    runs,
    runs,
    st.builds(lambda p, m: [encode_message(p, magic=m)], st.binary(max_size=150), st.sampled_from([0, 1])),
    st.builds(lambda size, count, seed: [encode_message(random.Random(seed).randbytes(size), magic=0)] * count,
              st.integers(0, 30), st.integers(1, 20), st.integers(0, 2**32)),
    st.builds(lambda ps, c: [wrapper_entry(ps, c)],
              st.lists(st.binary(max_size=30), max_size=4), st.sampled_from([CODEC_GZIP, CODEC_SNAPPY])),
    # Runs of equal junk: lengths below the minimums (zeroed disk blocks), bodies
    # of any bytes.
    st.builds(lambda length, body, count: [struct.pack(">i", length) + body[:max(length, 0)]] * count,
              st.integers(-2, 12), st.binary(min_size=12, max_size=12), st.integers(1, 12)),
)

# Values that break a field in interesting ways (the length's neighbours, the
# minimums, negative, past message.max.bytes).
length_values = st.sampled_from([-1, -2**31, 0, 4, 5, 6, 9, 10, 2**31 - 1, 1_000_001, 301])


@st.composite
def message_sets(draw, pieces=piece, min_pieces=0):
    entries = [e for entries in draw(st.lists(pieces, min_size=min_pieces, max_size=6)) for e in entries]
    data = bytearray(b"".join(entries))
    starts = []
    pos = 0
    for e in entries:
        starts.append(pos)
        pos += len(e)
    for _ in range(draw(st.integers(0, 4)) if entries else 0):
        at = starts[draw(st.integers(0, len(starts) - 1))]
        (length,) = struct.unpack_from(">i", data, at)
        field = draw(st.sampled_from(["length", "length+-", "magic", "attributes", "crc", "payload", "byte"]))
        if field == "length":
            struct.pack_into(">i", data, at, draw(length_values))
        elif field == "length+-":
            changed = length + draw(st.sampled_from([-1, 1, -4, 4, 104]))
            struct.pack_into(">i", data, at, (changed + 2**31) % 2**32 - 2**31)
        elif field in ("magic", "attributes", "crc", "payload"):
            offset = {"magic": 4, "attributes": 5, "crc": 6 + draw(st.integers(0, 3)),
                      "payload": 10 + draw(st.integers(0, max(0, length - 7)))}[field]
            if at + offset < len(data):
                data[at + offset] = draw(st.integers(0, 255))
        else:
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    if data and draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)):]
    return bytes(data)


max_bytes = st.one_of(st.just(DEFAULT_MAX_MESSAGE_BYTES), st.just(DEFAULT_MAX_MESSAGE_BYTES),
                      st.integers(0, 150), st.integers(4000, 4300))


@given(message_sets(), max_bytes, st.integers(0, 2**40), st.sampled_from(["bytes", "bytearray", "view"]))
@settings(max_examples=300, deadline=None)
def test_fast_paths_equal_the_per_entry_walk(data, max_message_bytes, base, kind):
    if kind == "bytearray":
        buf = bytearray(data)
    elif kind == "view":
        buf = memoryview(b"\x01\x00\x00" + data + b"\x00\x00\x00\x07")[3:3 + len(data)]
    else:
        buf = data
    assert_same_as_reference(buf, max_message_bytes, base)


long_runs = st.builds(run_of, st.integers(4, 600), st.integers(0, 130), st.integers(0, 2**32))


@given(message_sets(st.one_of(long_runs, long_runs, piece), min_pieces=1), max_bytes, st.integers(0, 2**40))
@settings(max_examples=200, deadline=None)
def test_fast_paths_equal_the_per_entry_walk_on_long_runs(data, max_message_bytes, base):
    assert_same_as_reference(data, max_message_bytes, base)


# -------------------------------------------------- one break inside a run

def long_run(count=600, payload_size=90, seed=7) -> bytes:
    return b"".join(run_of(count, payload_size, seed))


ENTRY = 100  # length prefix + v1 header + 90-byte payload


def broken_at(index: int, how: str) -> bytes:
    data = bytearray(long_run())
    at = index * ENTRY
    if how == "crc":
        data[at + 6] ^= 0x10
    elif how == "payload":
        data[at + 50] ^= 0x01
    elif how == "magic":
        data[at + 4] = 2
    elif how == "attributes":
        data[at + 5] = 4
    elif how == "gzip codec":  # valid for a broker check, not for a reader
        data[at + 5] = CODEC_GZIP
    elif how == "length":
        struct.pack_into(">i", data, at, 97)
    elif how == "huge length":
        struct.pack_into(">i", data, at, 2**31 - 1)
    elif how == "v0 entry":
        data[at:at + ENTRY] = encode_message(b"v" * 91, magic=0)
    elif how == "shorter entry":
        data[at:at + ENTRY] = encode_message(b"s" * 40) + encode_message(b"t" * 40)
    elif how == "truncated":
        del data[at + 37:]
    return bytes(data)


HOW = ["crc", "payload", "magic", "attributes", "gzip codec", "length", "huge length", "v0 entry",
       "shorter entry", "truncated"]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("index", [0, 1, 3, 4, 100, 255, 256, 257, 511, 597, 599])
def test_one_break_inside_a_run(how, index):
    assert_same_as_reference(broken_at(index, how))
    assert_same_as_reference(broken_at(index, how), max_message_bytes=150, base_offset=10**12)


@pytest.mark.parametrize("how", ["crc", "magic", "attributes", "length", "huge length"])
def test_error_names_the_broken_entry(how):
    data = broken_at(300, how)
    with pytest.raises(HostbrokerError, match=f"^entry at byte {300 * ENTRY}:"):
        validate_message_set(data)
    assert scan_valid_prefix(data) == (300 * ENTRY, 300)
    got = []
    with pytest.raises(HostbrokerError, match=f"^entry at byte {5000 + 300 * ENTRY}:"):
        for m in iter_messages(data, 5000):
            got.append(m)
    assert len(got) == 300 and got[-1].next_offset == 5000 + 300 * ENTRY


def test_too_large_run_is_refused_at_its_first_entry():
    data = encode_message_set([b"a" * 20] * 10) + long_run()
    with pytest.raises(MessageTooLargeError, match="^entry at byte 300: length 96 exceeds"):
        validate_message_set(data, 95)
    assert scan_valid_prefix(data, 95) == (300, 10)
    assert count_entries(data) == (610, len(data))
    assert validate_message_set(data, 96) == 610


@pytest.mark.parametrize("junk", [bytes(64), b"\xff" * 64, (struct.pack(">i", 4) + b"abcd") * 16,
                                  (struct.pack(">i", 5) + b"\x00abcd") * 16, (b"\x00\x00\x00\x06\x01\x00" + bytes(4)) * 16])
def test_runs_of_junk(junk):
    assert_same_as_reference(junk)
    assert_same_as_reference(long_run(10) + junk)
    assert_same_as_reference(junk[:-1])


@pytest.mark.parametrize("sizes", [
    [(600, 90), (300, 50), (5, 90), (3, 20), (700, 20)],  # runs of several lengths back to back
    [(1, n) for n in range(200)],  # no two entries of the same length
    [(255, 4090), (257, 4091), (9, 4200)],  # around the bulk bounds
    [(256, 0), (1, 1), (256, 0)],  # empty payloads
])
def test_runs_of_several_lengths(sizes):
    data = b"".join(b"".join(run_of(count, size, seed)) for seed, (count, size) in enumerate(sizes))
    total = sum(count for count, _ in sizes)
    assert validate_message_set(data) == total
    assert count_entries(data) == (total, len(data))
    assert len(list(iter_messages(data, 0))) == total
    for cut in (len(data) - 1, len(data) // 2, len(data) // 3 + 5):
        assert_same_as_reference(data[:cut])


def test_mixed_magics_and_wrappers_between_runs():
    data = (long_run(300) + encode_message(b"old", magic=0) + long_run(40, seed=1)
            + wrapper_entry([b"x", b"y"], CODEC_SNAPPY) + long_run(260, seed=2)
            + wrapper_entry([b"z"], CODEC_GZIP) + encode_message(b"tail", magic=0))
    assert validate_message_set(data) == 300 + 1 + 40 + 1 + 260 + 1 + 1
    assert [m.payload for m in iter_messages(data, 0)][300:302] == [b"old", run_of(40, 90, 1)[0][10:]]
    assert_same_as_reference(data)
    assert_same_as_reference(data, base_offset=1 << 40)


# ------------------------------------------------- the fast paths are taken


def test_runs_are_taken_in_bulk(monkeypatch):
    taken = {"plain": 0, "lengths": 0}

    def spy(name, real):
        def wrapped(*args):
            result = real(*args)
            taken[name] += result[0]
            return result
        return wrapped

    monkeypatch.setattr(message, "_plain_run", spy("plain", message._plain_run))
    monkeypatch.setattr(message, "_length_run", spy("lengths", message._length_run))
    data = long_run(1000)
    assert validate_message_set(data) == 1000
    assert taken["plain"] == 1000
    assert len(list(iter_messages(data, 0))) == 1000
    assert taken["plain"] == 2000
    assert count_entries(data) == (1000, 100_000)
    assert taken["lengths"] == 1000
    # A break costs the run only its own entry.
    taken["plain"] = 0
    assert scan_valid_prefix(broken_at(500, "shorter entry") + b"\x00") == (60_000, 601)
    assert taken["plain"] >= 550
    # Entries past the check bound are checked one by one but read in bulk.
    taken["plain"] = 0
    big = b"".join(run_of(8, 5000, 3))
    assert validate_message_set(big) == 8 and taken["plain"] == 0
    assert len(list(iter_messages(big, 0))) == 8 and taken["plain"] == 8
