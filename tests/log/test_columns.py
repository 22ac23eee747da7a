"""decode_into gives exactly what iter_messages gives, column by column, and fails alike."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.errors import InvalidMessageError, MessageTooLargeError
from hostbroker.log.columns import Columns, decode_into
from hostbroker.log.message import (CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, encode_message,
                                    encode_message_set, iter_messages)

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY]


def reference(buf, base, **kw):
    return [(m.offset, m.next_offset, m.payload) for m in iter_messages(buf, base, **kw)]


def decoded(buf, base, **kw):
    columns = Columns()
    end = decode_into(columns, buf, base, **kw)
    # each row's next offset is the next row's offset, the last one's the returned end
    rows = list(zip(columns.offsets, columns.offsets[1:] + [end], columns.values))
    assert columns.value_bytes == sum(len(v) for v in columns.values)
    return rows, end


# Sets as producers make them (runs of equal sizes), mixed sizes, v0 entries and wrappers.
pieces = st.one_of(
    st.builds(lambda n, size: encode_message_set([b"r" * size] * n), st.integers(1, 300),
              st.integers(0, 300)),
    st.builds(lambda ps: encode_message_set(ps), st.lists(st.binary(max_size=80), max_size=20)),
    st.builds(lambda p: encode_message(p, magic=0), st.binary(max_size=40)),
    st.builds(lambda ps, c: encode_message_set(ps, codec=c),
              st.lists(st.binary(max_size=60), min_size=1, max_size=12),
              st.sampled_from([CODEC_GZIP, CODEC_SNAPPY])),
)


@given(st.lists(pieces, max_size=6), st.integers(0, 2**40), st.integers(0, 40), st.booleans())
@settings(max_examples=150, deadline=None)
def test_same_messages_as_iter_messages(parts, base, cut, check_crc):
    whole = b"".join(parts)
    buf = whole[:len(whole) - cut] if cut < len(whole) else whole
    rows, end = decoded(buf, base, check_crc=check_crc)
    assert rows == reference(buf, base, check_crc=check_crc)
    # `end` is the offset after the last whole entry
    assert end == (rows[-1][1] if rows else base)


@given(st.lists(st.binary(max_size=50), min_size=1, max_size=40), st.integers(0, 100))
@settings(max_examples=100, deadline=None)
def test_end_takes_only_entries_that_start_before_it(payloads, base):
    buf = b"".join(encode_message(p) for p in payloads)
    starts = [base]
    for p in payloads:
        starts.append(starts[-1] + len(encode_message(p)))
    for end in starts:
        rows, stop = decoded(buf, base, end=end)
        assert [r[0] for r in rows] == [s for s in starts[:-1] if s < end]
        assert stop == end


def test_run_with_bad_crc_keeps_the_messages_before_it():
    good = encode_message_set([b"x" * 100] * 40)
    bad = bytearray(encode_message_set([b"x" * 100] * 40))
    bad[110 * 5 + 12] ^= 1  # a payload byte of the sixth entry
    columns = Columns()
    with pytest.raises(InvalidMessageError, match="CRC mismatch"):
        decode_into(columns, good + bytes(bad), 0)
    assert len(columns) == 45
    assert columns.offsets[-1] == 44 * 110
    assert columns.value_bytes == 4500


def test_too_large_entry_raises_like_iter_messages():
    buf = encode_message(b"y" * 200)
    with pytest.raises(MessageTooLargeError):
        decode_into(Columns(), buf, 0, max_message_bytes=100)


def test_wrapper_rows_follow_the_offset_rule():
    buf = encode_message(b"a") + encode_message_set([b"b", b"c", b"d"], codec=CODEC_GZIP)
    rows, end = decoded(buf, 1000)
    first = len(encode_message(b"a"))
    assert rows == [(1000, 1000 + first, b"a"), (1000 + first, 1000 + first, b"b"),
                    (1000 + first, 1000 + first, b"c"), (1000 + first, 1000 + len(buf), b"d")]
    assert end == 1000 + len(buf)
