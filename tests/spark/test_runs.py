"""take_run + the general decoder give exactly the rows of iter_messages."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.log.columns import Columns, decode_into
from hostbroker.log.message import encode_message, encode_message_set, iter_messages
from hostbroker.spark.runs import MIN_RUN, take_run


def rows_via_run(buf, base, check_crc=True):
    run = take_run(buf, base, len(buf), 10**6, check_crc)
    rows = []
    taken = 0
    if run is not None:
        offsets, values, taken = run
        rows = list(zip(offsets.to_pylist(), values.to_pylist()))
    rest = Columns()
    decode_into(rest, buf[taken:], base + taken, check_crc=check_crc)
    return run is not None, rows + list(zip(rest.offsets, rest.values))


@given(st.integers(0, 300), st.integers(1, 120), st.binary(max_size=30), st.integers(0, 2**40),
       st.integers(0, 5))
@settings(max_examples=120, deadline=None)
def test_runs_then_the_rest(n, size, tail, base, cut):
    buf = encode_message_set([bytes([i % 251]) * size for i in range(n)])
    buf += encode_message(tail) + encode_message_set([b"z" * size] * 3)
    buf = buf[:len(buf) - cut]
    used, rows = rows_via_run(buf, base)
    assert rows == [(m.offset, m.payload) for m in iter_messages(buf, base)]
    assert used == (n >= MIN_RUN and size >= 1)


def test_a_bad_crc_ends_the_run_before_it():
    good = encode_message_set([b"v" * 50] * 200)
    bad = bytearray(good)
    bad[60 * 150 + 20] ^= 0xFF  # inside the payload of entry 150
    run = take_run(bytes(bad), 0, len(bad), 10**6, True)
    assert run is not None and run[2] == 60 * 150
    assert run[1].to_pylist() == [b"v" * 50] * 150
    assert take_run(bytes(bad), 0, len(bad), 10**6, False)[2] == len(bad)


def test_a_different_header_ends_the_run():
    buf = encode_message_set([b"a" * 20] * 100) + encode_message(b"a" * 20, magic=0)
    run = take_run(buf, 7, len(buf), 10**6, True)
    assert run[2] == 100 * 30 and run[0].to_pylist() == list(range(7, 7 + 3000, 30))
