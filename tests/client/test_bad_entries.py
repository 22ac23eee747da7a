"""Entries a consumer cannot read: bounded inflation, typed errors naming where, skipping."""

from __future__ import annotations

import gzip
import logging
import tracemalloc

import pytest
import snappy

from hostbroker.client import DecompressedTooLargeError, FetchedSet, InvalidEntryError
from hostbroker.log.message import (CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set,
                                    iter_messages)

MIB = 1 << 20


def bomb(codec: int, inflated: int) -> bytes:
    """One wrapper entry whose inner set inflates to about ``inflated`` bytes."""
    inner = encode_message_set([bytes(MIB - 10)] * (inflated // MIB))
    payload = gzip.compress(inner, mtime=0) if codec == CODEC_GZIP else snappy.compress(inner)
    return encode_message(payload, codec=codec)


def garbage_wrapper(codec: int) -> bytes:
    """A wrapper whose CRC is right but whose payload is not compressed data."""
    return encode_message(b"this is not compressed at all" * 4, codec=codec)


def fetched(data: bytes, *, skip: bool = False, limit: int = MIB, offset: int = 1000) -> FetchedSet:
    return FetchedSet("t", 3, offset, data, offset + len(data), max_message_bytes=limit,
                      skip_bad=skip)


@pytest.mark.parametrize("codec, inflated", [(CODEC_GZIP, 64 * MIB), (CODEC_SNAPPY, 16 * MIB)])
def test_a_bomb_is_refused_without_inflating_it(codec, inflated):
    # Snappy compresses at most ~21:1: 16 MiB make a wrapper under the 1 MiB limit.
    before = encode_message_set([b"a", b"b"])
    data = before + bomb(codec, inflated) + encode_message_set([b"c"])
    tracemalloc.start()
    try:
        got = []
        with pytest.raises(DecompressedTooLargeError) as caught:
            for message in fetched(data):
                got.append(message[2])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [b"a", b"b"]
    error = caught.value
    assert (error.topic, error.partition, error.offset) == ("t", 3, 1000 + len(before))
    assert error.next_offset == 1000 + len(data) - len(encode_message_set([b"c"]))
    assert str(error).startswith(f"t/3: bad entry at offset {error.offset}: ")
    assert "inflates past 1048576 bytes" in str(error)
    assert peak < 8 * MIB, peak  # never what the wrapper inflates to


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_a_wrapper_that_does_not_decompress_names_its_place(codec):
    first = encode_message_set([b"x"])
    data = first + garbage_wrapper(codec) + encode_message_set([b"y"])
    messages = iter(fetched(data))
    assert next(messages)[2] == b"x"
    with pytest.raises(InvalidEntryError) as caught:
        next(messages)
    assert not isinstance(caught.value, DecompressedTooLargeError)
    assert caught.value.offset == 1000 + len(first)
    assert "does not decompress" in caught.value.reason


def test_skipping_bad_entries_keeps_every_good_message(caplog):
    data = (encode_message_set([b"1", b"2"]) + garbage_wrapper(CODEC_GZIP)
            + encode_message_set([b"3"]) + bomb(CODEC_GZIP, 4 * MIB)
            + encode_message_set([b"4", b"5"], codec=CODEC_GZIP) + garbage_wrapper(CODEC_SNAPPY))
    with caplog.at_level(logging.WARNING):
        got = [value for _, _, value in fetched(data, skip=True)]
    assert got == [b"1", b"2", b"3", b"4", b"5"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert all(w.startswith("t/3: bad entry at offset ") and w.endswith("skipped (skip.bad.messages)")
               for w in warnings)


def test_a_crc_mismatch_is_an_invalid_entry_and_skippable():
    good = encode_message_set([b"ok"])
    damaged = bytearray(encode_message(b"payload"))
    damaged[-1] ^= 0xFF
    data = good + bytes(damaged) + good
    with pytest.raises(InvalidEntryError, match="CRC mismatch") as caught:
        list(fetched(data))
    assert caught.value.offset == 1000 + len(good)
    assert caught.value.next_offset == 1000 + len(good) + len(damaged)
    assert [v for _, _, v in fetched(data, skip=True)] == [b"ok", b"ok"]


def test_iter_messages_limit_applies_to_what_a_wrapper_inflates_to():
    wrapper = encode_message_set([bytes(1000)] * 10, codec=CODEC_GZIP)
    assert len(list(iter_messages(wrapper, 0, max_inflated_bytes=20000))) == 10
    with pytest.raises(Exception, match="inflates past 5000 bytes"):
        list(iter_messages(wrapper, 0, max_inflated_bytes=5000))
    # Concatenated gzip members, zero padding between them, as gzip.decompress takes them.
    inner = encode_message_set([b"m1"]), encode_message_set([b"m2"])
    payload = gzip.compress(inner[0]) + b"\0\0" + gzip.compress(inner[1])
    two = encode_message(payload, codec=CODEC_GZIP)
    assert [m.payload for m in iter_messages(two, 0)] == [b"m1", b"m2"]
