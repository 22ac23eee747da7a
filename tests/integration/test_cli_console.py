"""``hostbroker produce`` and ``hostbroker consume`` as subprocesses against a real broker.

One broker serves the module: no test stops or reconfigures it, and each test has its own
topics and groups (``new_topic()``).
"""

from __future__ import annotations

import os
import subprocess
import sys

from hostbroker.client import EARLIEST, SimpleConsumer
from hostbroker.log.message import CODEC_GZIP, encode_message_set
from tests.integration.cli import hostbroker, lines, one_line_error, running, terminate
from tests.integration.wire_helpers import module_broker, new_topic

served = module_broker()


def _fill(broker, topic: str, partitions: int, per_partition: int) -> None:
    with broker.client() as client:
        client.create_topic(topic, partitions)
        for p in range(partitions):
            client.produce(topic, p, encode_message_set(
                [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(per_partition)]))


def _all_values(broker, topic: str) -> list[bytes]:
    with SimpleConsumer(broker.unix) as consumer:
        (found,) = consumer.metadata([topic]).topics
        values = []
        for p in sorted(part.partition for part in found.partitions):
            start = consumer.offsets_before(topic, p, EARLIEST)[0]
            values += [v for _, _, v in consumer.messages(topic, p, start, stop_at_end=True)]
        return values


def test_consume_from_beginning_every_partition_and_compressed(served):
    t = new_topic("t")
    _fill(served, t, 3, 4)
    with served.client() as client:
        client.produce(t, 1, encode_message_set([b"zip-a", b"zip-b"], codec=CODEC_GZIP))
    result = hostbroker("consume", "--bootstrap", served.tcp, "--topic", t,
                        "--from-beginning", "--timeout-ms", "500")
    assert result.returncode == 0, result.stderr
    expected = sorted([f"{t}-{p}-{i}" for p in range(3) for i in range(4)] + ["zip-a", "zip-b"])
    assert sorted(lines(result)) == expected
    per_partition = [line for line in lines(result) if line.startswith(f"{t}-1-") or "zip" in line]
    assert per_partition == [f"{t}-1-0", f"{t}-1-1", f"{t}-1-2", f"{t}-1-3", "zip-a", "zip-b"]


def test_consume_max_messages_partition_offset_and_raw_bytes(served):
    raw = new_topic("raw")
    with served.client() as client:
        client.create_topic(raw, 2)
        first = client.produce(raw, 1, encode_message_set([b"a", b"\x00\xff binary"]))
        second = client.produce(raw, 1, encode_message_set([b"c", b"d"]))
    limited = hostbroker("consume", "--bootstrap", served.unix, "--topic", raw,
                         "--from-beginning", "--max-messages", "3")
    assert limited.returncode == 0
    assert limited.stdout == b"a\n\x00\xff binary\nc\n"
    at_offset = hostbroker("consume", "--bootstrap", served.unix, "--topic", raw,
                           "--partition", "1", "--offset", str(second.base_offset),
                           "--timeout-ms", "300")
    assert at_offset.stdout == b"c\nd\n"
    assert first.base_offset == 0
    nothing_new = hostbroker("consume", "--bootstrap", served.unix, "--topic", raw,
                             "--timeout-ms", "300")
    assert nothing_new.returncode == 0 and nothing_new.stdout == b""


def test_consume_group_commits_what_it_printed(served):
    g, readers = new_topic("g"), new_topic("readers")
    _fill(served, g, 1, 6)
    b = ("--bootstrap", served.tcp, "--topic", g, "--group", readers)
    first = hostbroker("consume", *b, "--from-beginning", "--max-messages", "4")
    assert lines(first) == [f"{g}-0-0", f"{g}-0-1", f"{g}-0-2", f"{g}-0-3"]
    # Stopped by the count: the pause limit only bounds a run that finds too few.
    rest = hostbroker("consume", *b, "--max-messages", "2", "--timeout-ms", "20000")
    assert lines(rest) == [f"{g}-0-4", f"{g}-0-5"]
    again = hostbroker("consume", *b, "--timeout-ms", "300")
    assert again.returncode == 0 and lines(again) == []


def test_consume_stops_on_sigterm_and_on_a_closed_pipe(served):
    s, stop = new_topic("s"), new_topic("stop")
    _fill(served, s, 1, 50)
    with running("consume", "--bootstrap", served.tcp, "--topic", s, "--from-beginning",
                 "--group", stop) as proc:
        assert proc.stdout.readline() == f"{s}-0-0\n".encode()
        out, err = terminate(proc)
    assert proc.returncode == 0, err
    assert err == b""
    with served.client() as client:
        (committed,) = client.offset_fetch(stop, [(s, 0)])
    assert committed.offset > 0  # what was printed before the signal

    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` that already exited
    closed = subprocess.run([sys.executable, "-m", "hostbroker", "consume", "--bootstrap",
                             served.tcp, "--topic", s, "--from-beginning"],
                            stdout=write_end, stderr=subprocess.PIPE, timeout=60)
    os.close(write_end)
    assert closed.returncode == 0 and closed.stderr == b""


def test_consume_refusals(served, tmp_path):
    r, nope = new_topic("r"), new_topic("nope")
    _fill(served, r, 1, 1)
    b = ("--bootstrap", served.tcp)
    for args, status, needle in [
        (("--topic", nope, "--timeout-ms", "100"), 1, f"no topic {nope}"),
        (("--topic", r, "--partition", "5"), 1, f"topic {r} has no partition 5"),
        (("--topic", r, "--offset", "0"), 2, "--offset needs --partition"),
        (("--topic", r, "--partition", "0", "--offset", "999"), 1, "OFFSET_OUT_OF_RANGE"),
        (("--topic", r, "--max-messages", "0"), 2, "--max-messages must be at least 1"),
        (("--topic", r, "--property", "fetch.size=big"), 2, "fetch.size"),
        (("--topic", r, "--property", "colour=red"), 2, "colour: unknown"),
    ]:
        result = hostbroker("consume", *b, *args)
        assert result.returncode == status, (args, result)
        assert needle in one_line_error(result)
    down = hostbroker("consume", "--bootstrap", f"unix://{tmp_path}/none.sock", "--topic", r)
    assert down.returncode == 1 and "cannot reach the broker" in one_line_error(down)


def test_produce_lines_then_consume_them(served):
    topic = new_topic("lines")
    with served.client() as client:
        client.create_topic(topic, 1)
    sent = hostbroker("produce", "--bootstrap", served.tcp, "--topic", topic,
                      input=b"first\nsecond with spaces\n\n\xff\xfe raw\nno newline at end")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == b"" and sent.stderr == b""
    assert _all_values(served, topic) == [b"first", b"second with spaces", b"", b"\xff\xfe raw",
                                          b"no newline at end"]
    echoed = hostbroker("consume", "--bootstrap", served.tcp, "--topic", topic,
                        "--from-beginning", "--max-messages", "5")
    assert echoed.stdout == b"first\nsecond with spaces\n\n\xff\xfe raw\nno newline at end\n"


def test_produce_keys_choose_partitions_and_are_not_stored(served):
    import zlib

    keyed = new_topic("keyed")
    with served.client() as client:
        client.create_topic(keyed, 4)
    text = "".join(f"user{i % 5}|event {i}\n" for i in range(40)) + "no separator here\n"
    result = hostbroker("produce", "--bootstrap", served.unix, "--topic", keyed,
                        "--key-separator", "|", input=text.encode())
    assert result.returncode == 1
    assert one_line_error(result) == ("hostbroker produce: 1 line not sent (line 41 has no key "
                                      "separator b'|')")
    with SimpleConsumer(served.unix) as consumer:
        for p in range(4):
            values = [v for _, _, v in consumer.messages(keyed, p, 0, stop_at_end=True)]
            expected = [f"event {i}".encode() for i in range(40)
                        if zlib.crc32(f"user{i % 5}".encode()) % 4 == p]
            assert values == expected  # the key's partition, in order, without the key


def test_produce_sync_gzip_acks_all_and_failures(served, tmp_path):
    from hostbroker.log.message import CODEC_GZIP, iter_messages

    zipped, z = new_topic("zipped"), new_topic("z")
    with served.client() as client:
        client.create_topic(zipped, 1)
    result = hostbroker("produce", "--bootstrap", served.tcp, "--topic", zipped,
                        "--compression", "gzip", "--acks", "-1", "--sync",
                        input=b"".join(b"line %d\n" % i for i in range(10)))
    assert result.returncode == 0, result.stderr
    with served.client() as client:
        fetched = client.fetch(zipped, 0, 0, 1 << 20)
    messages = list(iter_messages(fetched.message_set, 0))
    assert [m.payload for m in messages] == [b"line %d" % i for i in range(10)]
    assert {m.codec for m in messages} == {CODEC_GZIP}

    too_long = hostbroker("produce", "--bootstrap", served.tcp, "--topic", zipped,
                          "--property", "message.max.bytes=1000", input=b"x" * 2000 + b"\nfits\n")
    assert too_long.returncode == 1
    assert one_line_error(too_long).startswith(
        "hostbroker produce: 1 line not sent (line 1: a message of 2000 bytes")
    assert _all_values(served, zipped)[-1] == b"fits"

    down = hostbroker("produce", "--bootstrap", f"unix://{tmp_path}/none.sock", "--topic", z,
                      input=b"a\nb\n")
    assert down.returncode == 1
    assert one_line_error(down).startswith("hostbroker produce: 2 of 2 messages not acknowledged")
    for args, needle in [(("--topic", "a b"), "invalid topic name"),
                         (("--topic", z, "--key-separator", ""), "--key-separator"),
                         (("--topic", z, "--property", "batch.size=0"), "batch.size"),
                         (("--topic", z, "--acks", "2"), "invalid choice")]:
        refused = hostbroker("produce", "--bootstrap", served.tcp, *args, input=b"x\n")
        assert refused.returncode == 2, (args, refused)
        assert needle in one_line_error(refused)
