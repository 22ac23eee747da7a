"""Entries consumers cannot read, produced to a real broker (which never decompresses, so it
takes them): a gzip bomb and a wrapper whose CRC is right over a payload that is not
compressed data. Every consumer stops with an error naming topic, partition and offset, or
skips the entry with a warning when told to; inflating never passes fetch.message.max.bytes.

The tests share one broker (``served``; the mirror's source): each produces to topics and
commits to groups of its own, and none changes or stops the broker."""

from __future__ import annotations

import gzip
import time

import psutil
import pytest

from hostbroker.client import (ConsumerConnector, DecompressedTooLargeError, InvalidEntryError,
                               SimpleClient, SimpleConsumer)
from hostbroker.log.message import CODEC_GZIP, CODEC_SNAPPY, encode_message, encode_message_set
from tests.integration.cli import hostbroker, lines, one_line_error, running
from tests.integration.wire_helpers import module_broker

MIB = 1 << 20
LIMIT = {"fetch.message.max.bytes": MIB}

served = module_broker()


@pytest.fixture
def broker(served):
    """The module's shared broker (topic and group names differ from test to test)."""
    return served


def gzip_bomb(inflated: int = 64 * MIB) -> bytes:
    inner = encode_message_set([bytes(MIB - 10)] * (inflated // MIB))
    return encode_message(gzip.compress(inner, compresslevel=9, mtime=0), codec=CODEC_GZIP)


def garbage(codec: int = CODEC_GZIP) -> bytes:
    return encode_message(b"not compressed data, but the CRC is right" * 3, codec=codec)


def produce(uri: str, topic: str, *sets: bytes, partitions: int = 1) -> list[int]:
    """Each set produced in turn to partition 0; the offset each one landed at."""
    offsets = []
    with SimpleClient(uri) as client:
        client.create_topic(topic, partitions)
        for data in sets:
            offsets.append(client.produce(topic, 0, data).base_offset)
    return offsets


def good(*values: bytes) -> bytes:
    return encode_message_set(list(values))


def test_simple_consumer_stops_at_a_bomb_and_can_skip_it(broker):
    offsets = produce(broker.unix, "bomb", good(b"a"), gzip_bomb(), good(b"b"))
    with SimpleConsumer(broker.unix, LIMIT) as consumer:
        fetched = consumer.fetch("bomb", 0, 0)
        with pytest.raises(DecompressedTooLargeError) as caught:
            [v for _, _, v in fetched]
    error = caught.value
    assert (error.topic, error.partition, error.offset, error.next_offset) == (
        "bomb", 0, offsets[1], offsets[2])
    assert f"bomb/0: bad entry at offset {offsets[1]}: gzip payload inflates past" in str(error)
    with SimpleConsumer(broker.unix, LIMIT, skip_bad_messages=True) as consumer:
        got = [v for _, _, v in consumer.messages("bomb", 0, 0, stop_at_end=True)]
    assert got == [b"a", b"b"]


def test_a_stream_stops_at_a_bad_wrapper_or_skips_it(broker):
    offsets = produce(broker.unix, "bad", good(b"1", b"2"), garbage(CODEC_SNAPPY), good(b"3"),
                      gzip_bomb(8 * MIB), good(b"4"))
    config = {**LIMIT, "auto.offset.reset": "earliest", "consumer.timeout.ms": 15000,
              "fetch.wait.max.ms": 50, "auto.commit.enable": False}
    with ConsumerConnector(broker.unix, config, group_id="stops") as connector:
        (stream,) = connector.create_message_streams({"bad": 1})["bad"]
        assert [next(stream).value for _ in range(2)] == [b"1", b"2"]
        for _ in range(2):  # the stream stays stopped at it
            with pytest.raises(InvalidEntryError) as caught:
                next(stream)
            assert caught.value.offset == offsets[1]
        connector.commit_offsets()
    with SimpleClient(broker.unix) as client:
        (stored,) = client.offset_fetch("stops", [("bad", 0)])
    assert stored.offset == offsets[1]  # before the bad entry: a restart meets it again
    with ConsumerConnector(broker.unix, config, group_id="stops",
                           skip_bad_messages=True) as connector:
        (stream,) = connector.create_message_streams({"bad": 1})["bad"]
        assert [next(stream).value for _ in range(2)] == [b"3", b"4"]


def peak_rss(proc, deadline: float) -> int:
    """The largest RSS of ``proc`` seen until it exits, sampled every few ms."""
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.002)
    return peak


def test_console_consume_bounds_a_bomb_and_stops_in_one_line(broker):
    offsets = produce(broker.unix, "cb", good(b"before"), gzip_bomb(), good(b"after"))
    args = ("consume", "--bootstrap", broker.unix, "--topic", "cb", "--from-beginning",
            "--property", f"fetch.message.max.bytes={MIB}", "--timeout-ms", "20000")
    with running(*args) as proc:
        peak = peak_rss(proc, time.monotonic() + 60)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert out == b"before\n"
    assert err.decode().splitlines() == [
        f"hostbroker consume: cb/0: bad entry at offset {offsets[1]}: gzip payload inflates "
        f"past {MIB} bytes (--skip-bad-messages skips it)"]
    # The interpreter and the client take ~40 MB; the bomb inflates to 64 MiB.
    assert peak < 100 * MIB, peak

    skipped = hostbroker(*args[:-2], "--skip-bad-messages", "--max-messages", "2",
                         "--timeout-ms", "20000")
    assert skipped.returncode == 0, skipped.stderr
    assert lines(skipped) == ["before", "after"]
    warning = skipped.stderr.decode().splitlines()
    assert len(warning) == 1 and f"bad entry at offset {offsets[1]}" in warning[0]
    assert "skipped" in warning[0]


def test_console_consume_group_stops_at_a_corrupt_wrapper_after_committing(broker):
    offsets = produce(broker.unix, "cg", good(b"x1", b"x2"), garbage(), good(b"x3"))
    args = ("consume", "--bootstrap", broker.unix, "--topic", "cg", "--group", "cg",
            "--from-beginning", "--timeout-ms", "20000")
    stopped = hostbroker(*args)
    assert stopped.returncode == 1
    assert lines(stopped) == ["x1", "x2"]
    assert one_line_error(stopped).startswith(f"hostbroker consume: cg/0: bad entry at offset "
                                              f"{offsets[1]}: gzip payload does not decompress")
    skipped = hostbroker(*args, "--skip-bad-messages", "--max-messages", "1")
    assert skipped.returncode == 0, skipped.stderr
    assert lines(skipped) == ["x3"]  # it resumed where the first run stopped


def test_consume_offset_inside_an_entry_is_refused(broker):
    offsets = produce(broker.unix, "mid", good(b"first entry payload", b"second entry payload"))
    base = ("consume", "--bootstrap", broker.unix, "--topic", "mid", "--partition", "0",
            "--max-messages", "1", "--timeout-ms", "5000")
    for inside in (offsets[0] + 1, offsets[0] + 4, offsets[0] + 10):
        refused = hostbroker(*base, "--offset", str(inside))
        assert refused.returncode == 1
        assert one_line_error(refused).startswith(
            f"hostbroker consume: offset {inside} is not the start of an entry in mid/0")
    second = offsets[0] + len(good(b"first entry payload"))
    fine = hostbroker(*base, "--offset", str(second))
    assert fine.returncode == 0 and lines(fine) == ["second entry payload"]

    # Inside a longer log the bytes at a misplaced offset may read as a length that
    # fits the log (here 00 00 6b 01: 27,393 bytes): its CRC or magic gives it away.
    (start,) = produce(broker.unix, "long", good(*[b"p" * 100] * 400))
    refused = hostbroker(*base[:4], "long", *base[5:], "--offset", str(start + 1))
    assert refused.returncode == 1
    assert one_line_error(refused).startswith(
        f"hostbroker consume: offset {start + 1} is not the start of an entry in long/0 (")


def test_mirror_stops_at_a_bad_wrapper_or_skips_it(served, make_broker):
    source = served  # only "mb" and the mirror's group are read and committed there
    destination = make_broker()  # its own: the mirror creates and fills "mb" there
    offsets = produce(source.unix, "mb", good(b"m1"), garbage(), gzip_bomb(8 * MIB), good(b"m2"))
    args = ("mirror", "--from", source.unix, "--to", destination.unix, "--topics", "mb",
            "--consumer-property", f"fetch.message.max.bytes={MIB}", "--timeout-ms", "20000")
    stopped = hostbroker(*args)
    assert stopped.returncode == 1
    assert one_line_error(stopped).startswith(
        f"hostbroker mirror: mb/0: bad entry at offset {offsets[1]}: ")
    # m1 was committed by the run that stopped: one message is left to copy
    copied = hostbroker(*args, "--consumer-property", "skip.bad.messages=true",
                        "--max-messages", "1")
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout.decode().startswith("mirrored 1 message of mb from ")
    with SimpleConsumer(destination.unix) as consumer:
        got = [v for _, _, v in consumer.messages("mb", 0, 0, stop_at_end=True)]
    assert got == [b"m1", b"m2"]
