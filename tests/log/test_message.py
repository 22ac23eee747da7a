import gzip
import struct
import zlib

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.errors import HostbrokerError, InvalidMessageError, MessageTooLargeError
from hostbroker.log.message import (CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, DEFAULT_MAX_MESSAGE_BYTES,
                                    Message, count_entries, encode_message, encode_message_set,
                                    iter_messages, scan_valid_prefix, validate_message_set)

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY]
payload_lists = st.lists(st.binary(max_size=300), max_size=20)


def raw_entry(payload: bytes, *, magic: int = 1, attributes: int = 0, crc: int | None = None,
              length: int | None = None) -> bytes:
    """An entry with any field forced, valid or not."""
    crc = zlib.crc32(payload) if crc is None else crc
    header = bytes([magic & 0xFF]) + (bytes([attributes & 0xFF]) if magic == 1 else b"")
    body = header + struct.pack(">I", crc) + payload
    return struct.pack(">i", len(body) if length is None else length) + body


# ------------------------------------------------------------------ encoding

def test_encode_message_layout_v1():
    entry = encode_message(b"hello")
    assert entry == struct.pack(">iBBI", 11, 1, 0, zlib.crc32(b"hello")) + b"hello"


def test_encode_message_layout_v0():
    entry = encode_message(b"hello", magic=0)
    assert entry == struct.pack(">iBI", 10, 0, zlib.crc32(b"hello")) + b"hello"


def test_encode_message_rejects_bad_arguments():
    with pytest.raises(ValueError):
        encode_message(b"x", codec=3)
    with pytest.raises(ValueError):
        encode_message(b"x", magic=2)
    with pytest.raises(ValueError):
        encode_message(b"x", magic=0, codec=CODEC_GZIP)
    with pytest.raises(ValueError):
        encode_message_set([b"x"], codec=7)


def test_uncompressed_set_is_concatenation_of_entries():
    payloads = [b"a", b"", b"ccc"]
    assert encode_message_set(payloads) == b"".join(encode_message(p) for p in payloads)


def test_empty_set_for_every_codec():
    for codec in CODECS:
        assert encode_message_set([], codec=codec) == b""
        assert validate_message_set(b"") == 0
        assert list(iter_messages(b"", 0)) == []


def test_compressed_set_is_one_wrapper_around_plain_entries():
    payloads = [b"one", b"two"]
    inner = encode_message_set(payloads)
    gz = encode_message_set(payloads, codec=CODEC_GZIP)
    assert validate_message_set(gz) == 1
    assert gz[4:6] == bytes([1, CODEC_GZIP])
    assert gzip.decompress(gz[10:]) == inner
    sn = encode_message_set(payloads, codec=CODEC_SNAPPY)
    assert sn[4:6] == bytes([1, CODEC_SNAPPY])
    assert snappy.decompress(sn[10:]) == inner


# --------------------------------------------------------------- round trips

@given(payload_lists, st.sampled_from(CODECS), st.integers(0, 2**40))
@settings(max_examples=150, deadline=None)
def test_round_trip(payloads, codec, base):
    data = encode_message_set(payloads, codec=codec)
    messages = list(iter_messages(data, base))
    assert [m.payload for m in messages] == payloads
    assert count_entries(data) == (validate_message_set(data), len(data))
    assert scan_valid_prefix(data) == (len(data), validate_message_set(data))
    if not payloads:
        return
    if codec == CODEC_NONE:
        assert validate_message_set(data) == len(payloads)
        assert messages[0].offset == base
        for before, after in zip(messages, messages[1:]):
            assert before.next_offset == after.offset
        assert messages[-1].next_offset == base + len(data)
    else:
        assert validate_message_set(data) == 1
        assert all(m.offset == base and m.codec == codec for m in messages)
        assert [m.next_offset for m in messages] == [base] * (len(payloads) - 1) + [base + len(data)]


@given(st.lists(st.tuples(st.binary(max_size=50), st.sampled_from([0, 1])), max_size=10))
@settings(deadline=None)
def test_mixed_magics_round_trip(items):
    data = b"".join(encode_message(p, magic=m) for p, m in items)
    assert validate_message_set(data) == len(items)
    assert [(m.payload, m.magic) for m in iter_messages(data, 0)] == list(items)


def test_wrapper_offsets_after_plain_entries():
    plain = encode_message_set([b"a", b"b"])
    wrapper = encode_message_set([b"x", b"y", b"z"], codec=CODEC_GZIP)
    data = plain + wrapper + plain
    messages = list(iter_messages(data, 1000))
    w = 1000 + len(plain)
    assert [(m.offset, m.next_offset) for m in messages[2:5]] == [
        (w, w), (w, w), (w, w + len(wrapper))]
    assert messages[5].offset == w + len(wrapper)
    assert messages[0] == Message(1000, 1000 + 11, b"a", CODEC_NONE, 1)


def test_accepts_bytearray_and_memoryview_slices():
    data = encode_message_set([b"p" * 100] * 5)
    padded = bytearray(b"\xff" * 7 + data + b"\xee" * 3)
    view = memoryview(padded)[7:7 + len(data)]
    assert validate_message_set(view) == 5
    assert validate_message_set(bytearray(data)) == 5
    assert count_entries(view) == (5, len(data))
    assert [m.payload for m in iter_messages(view, 0)] == [b"p" * 100] * 5
    assert validate_message_set(memoryview(data).cast("c")) == 5


# ------------------------------------------------------------ invalid entries

INVALID = {
    "length below v0 minimum": raw_entry(b"", magic=0, length=4) + b"\x00" * 4,
    "negative length": struct.pack(">i", -1) + b"\x00" * 16,
    "v1 length 5": raw_entry(b"", magic=1, length=5)[:9],
    "magic 2": raw_entry(b"abc", magic=2),
    "magic -1": raw_entry(b"abc", magic=0xFF),
    "codec 3": raw_entry(b"abc", attributes=3),
    "attribute bit 2": raw_entry(b"abc", attributes=4),
    "attribute bit 7": raw_entry(b"abc", attributes=0x80),
    "bad crc v1": raw_entry(b"abc", crc=zlib.crc32(b"abd")),
    "bad crc v0": raw_entry(b"abc", magic=0, crc=1),
    "bad crc of a wrapper": raw_entry(b"compressed?", attributes=CODEC_GZIP, crc=5),
}


@pytest.mark.parametrize("name", sorted(INVALID))
@pytest.mark.parametrize("position", ["alone", "after valid entries"])
def test_each_rule_is_enforced(name, position):
    prefix = encode_message_set([b"ok", b"fine"]) if position != "alone" else b""
    data = prefix + INVALID[name]
    with pytest.raises(InvalidMessageError, match=f"byte {len(prefix)}:"):
        validate_message_set(data)
    assert scan_valid_prefix(data) == (len(prefix), 2 if prefix else 0)
    with pytest.raises(InvalidMessageError):
        list(iter_messages(data, 0))


def test_too_large_entry():
    data = encode_message_set([b"x" * 10, b"y" * 100])
    with pytest.raises(MessageTooLargeError, match="byte 20:"):
        validate_message_set(data, 105)
    assert validate_message_set(data, 106) == 2
    assert scan_valid_prefix(data, 105) == (20, 1)
    with pytest.raises(MessageTooLargeError):
        list(iter_messages(data, 0, max_message_bytes=105))


def test_too_large_v0_entry():
    data = encode_message(b"y" * 100, magic=0)
    with pytest.raises(MessageTooLargeError):
        validate_message_set(data, 104)
    assert validate_message_set(data, 105) == 1


def test_too_large_wins_over_partial():
    data = encode_message(b"y" * 100)[:50]
    with pytest.raises(MessageTooLargeError):
        validate_message_set(data, 50)


def test_partial_tail():
    data = encode_message_set([b"a" * 30, b"b" * 30, b"c" * 30])
    whole = len(data)
    for cut in range(whole):
        prefix = data[:cut]
        complete = cut // 40
        if cut % 40:
            with pytest.raises(InvalidMessageError, match="partial"):
                validate_message_set(prefix)
        else:
            assert validate_message_set(prefix) == complete
        assert scan_valid_prefix(prefix) == (complete * 40, complete)
        assert count_entries(prefix) == (complete, complete * 40)
        assert len(list(iter_messages(prefix, 0))) == complete


def test_v0_tail_shorter_than_v1_header():
    data = encode_message_set([b"a"]) + encode_message(b"", magic=0)
    assert len(encode_message(b"", magic=0)) == 9
    assert validate_message_set(data) == 2


def test_iter_without_crc_check_reads_bad_crc():
    data = raw_entry(b"abc", crc=0)
    assert [m.payload for m in iter_messages(data, 0, check_crc=False)] == [b"abc"]
    with pytest.raises(InvalidMessageError, match="CRC"):
        list(iter_messages(data, 0))


def test_iter_error_names_the_offset():
    data = encode_message(b"good") + raw_entry(b"bad", crc=0)
    with pytest.raises(InvalidMessageError, match="byte 514:"):
        list(iter_messages(data, 500))


# --------------------------------------------------------- wrapper contents

def wrapper(inner: bytes, codec: int = CODEC_GZIP) -> bytes:
    compressed = gzip.compress(inner) if codec == CODEC_GZIP else snappy.compress(inner)
    return encode_message(compressed, codec=codec)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_compressed_entry_inside_wrapper_is_invalid(codec):
    nested = wrapper(encode_message_set([b"deep"], codec=codec), codec)
    assert validate_message_set(nested) == 1  # the broker only checks the outer CRC
    with pytest.raises(InvalidMessageError, match="inside a compressed wrapper"):
        list(iter_messages(nested, 0))


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_wrapper_problems(codec):
    inner = encode_message_set([b"one", b"two"])
    for bad_inner, problem in [(inner[:-1], "partial"), (b"", "no messages"),
                               (inner[:10] + b"\x00" + inner[11:], "CRC")]:
        with pytest.raises(InvalidMessageError, match=problem):
            list(iter_messages(wrapper(bad_inner, codec), 0))


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_wrapper_that_does_not_decompress(codec):
    data = encode_message(b"\x1f\x8b not really compressed", codec=codec)
    assert validate_message_set(data) == 1
    with pytest.raises(InvalidMessageError, match="decompress"):
        list(iter_messages(data, 0))


def test_inner_entries_are_not_bound_by_max_message_bytes():
    data = encode_message_set([b"z" * 5000], codec=CODEC_GZIP)
    assert len(data) < 200
    assert [len(m.payload) for m in iter_messages(data, 0, max_message_bytes=200)] == [5000]


# ---------------------------------------------------------------- fuzzing

def only_our_errors(call):
    try:
        call()
    except HostbrokerError:
        pass


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_random_bytes_raise_only_our_errors(data):
    only_our_errors(lambda: validate_message_set(data))
    only_our_errors(lambda: list(iter_messages(data, 0)))
    only_our_errors(lambda: list(iter_messages(data, 0, check_crc=False)))
    length, count = scan_valid_prefix(data)
    assert 0 <= length <= len(data)
    entries, consumed = count_entries(data)
    assert 0 <= consumed <= len(data) and entries >= count


@given(payload_lists.filter(bool), st.sampled_from(CODECS), st.data())
@settings(max_examples=200, deadline=None)
def test_corrupted_sets_raise_only_our_errors(payloads, codec, data):
    encoded = bytearray(encode_message_set(payloads, codec=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
    only_our_errors(lambda: validate_message_set(encoded))
    only_our_errors(lambda: list(iter_messages(encoded, 0, check_crc=False)))
    only_our_errors(lambda: list(iter_messages(encoded, 0)))


@given(payload_lists, st.binary(max_size=60))
@settings(max_examples=100, deadline=None)
def test_valid_prefix_survives_trailing_bytes(payloads, tail):
    data = encode_message_set(payloads)
    length, count = scan_valid_prefix(data + tail)
    assert length >= len(data) and count >= len(payloads)


def test_default_max_message_bytes():
    assert DEFAULT_MAX_MESSAGE_BYTES == 1_000_000
