import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol.primitives import Reader, Writer

from tests.protocol.strategies import NO_DEADLINE, int16s, int32s, int64s


@NO_DEADLINE
@given(st.integers(-128, 127), int16s, int32s, int64s, st.none() | st.text(), st.none() | st.binary())
def test_writer_and_reader_agree(i8, i16, i32, i64, text, data):
    writer = Writer()
    writer.int8(i8)
    writer.int16(i16)
    writer.int32(i32)
    writer.int64(i64)
    writer.string(text)
    writer.bytes(data)
    reader = Reader(writer.getvalue())
    assert reader.int8() == i8
    assert reader.int16() == i16
    assert reader.int32() == i32
    assert reader.int64() == i64
    assert reader.string() == text
    read = reader.bytes()
    assert (read is None and data is None) or bytes(read) == data
    reader.expect_end()


def test_ints_are_big_endian_and_signed():
    reader = Reader(bytes.fromhex("ff 0102 fffffffe 0000000000000100"))
    assert reader.int8() == -1
    assert reader.int16() == 0x0102
    assert reader.int32() == -2
    assert reader.int64() == 256


def test_null_string_and_bytes():
    reader = Reader(struct.pack(">hi", -1, -1))
    assert reader.string() is None
    assert reader.bytes() is None


def test_bytes_is_a_zero_copy_slice():
    frame = bytearray(struct.pack(">i", 3) + b"abc")
    view = Reader(frame).bytes()
    frame[4] = ord("X")
    assert bytes(view) == b"Xbc"


def test_large_bytes_are_kept_by_reference_until_getvalue():
    big = bytes(range(256)) * 100
    writer = Writer()
    writer.int32(0)
    writer.bytes(big)
    writer.int16(7)
    writer.patch_int32(0, 42)
    assert writer.getvalue() == struct.pack(">ii", 42, len(big)) + big + struct.pack(">h", 7)
    assert len(writer) == 4 + 4 + len(big) + 2


@pytest.mark.parametrize(
    "data, read",
    [
        (b"", Reader.int8),
        (b"\x00", Reader.int16),
        (b"\x00\x00\x00", Reader.int32),
        (b"\x00" * 7, Reader.int64),
        (b"\x00", Reader.string),
        (b"\x00\x03ab", Reader.string),
        (b"\x00\x00\x00\x03ab", Reader.bytes),
        (b"\xff\xfe", Reader.string),
        (b"\xff\xff\xff\xfe", Reader.bytes),
        (b"\x00\x02\xff\xfe", Reader.string),
    ],
    ids=["int8", "int16", "int32", "int64", "string-len", "string", "bytes", "neg-string",
         "neg-bytes", "bad-utf8"],
)
def test_short_or_malformed_input_is_a_protocol_error(data, read):
    with pytest.raises(ProtocolError) as info:
        read(Reader(data))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_array_count_that_cannot_fit_fails_before_reading_items():
    calls = []

    def read_item(reader):
        calls.append(1)
        return reader.int64()

    data = struct.pack(">i", 2) + b"\x00" * 15  # two int64s need 16
    with pytest.raises(ProtocolError, match="cannot fit"):
        Reader(data).array(read_item, 8)
    assert calls == []
    with pytest.raises(ProtocolError, match="negative"):
        Reader(struct.pack(">i", -1)).array(read_item, 8)


def test_array_and_expect_end():
    writer = Writer()
    writer.array([1, 2, 3], Writer.int64)
    writer.int8(0)
    reader = Reader(writer.getvalue())
    assert reader.array(Reader.int64, 8) == (1, 2, 3)
    assert reader.remaining == 1
    with pytest.raises(ProtocolError, match="left over"):
        reader.expect_end()


def test_reader_starts_at_offset():
    assert Reader(b"\x00\x00\x07", offset=1).int16() == 7
    with pytest.raises(ProtocolError):
        Reader(b"", offset=1)
