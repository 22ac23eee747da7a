"""The CRC the log format uses is exactly ``zlib.crc32``, whatever computes it."""

import zlib

from hypothesis import given
from hypothesis import strategies as st

from hostbroker.log.message import crc32


@given(st.binary(max_size=70_000), st.integers(0, 64))
def test_same_values_as_zlib_for_every_buffer_kind(data, cut):
    expected = zlib.crc32(data)
    assert crc32(data) == expected
    assert crc32(bytearray(data)) == expected
    assert crc32(memoryview(b"\x00" * cut + data)[cut:]) == expected


def test_known_value():
    assert crc32(b"123456789") == 0xCBF43926  # the CRC-32/IEEE check value
