"""Error codes a well-framed request can earn, and a broker that refuses to start.

The shared broker runs with ``auto.create.topics.enable=false`` and
``message.max.bytes=1000``, so every test creates its topics. Invalid message
sets go in one request next to a valid set for another partition: the bad
partition must get its code and nothing appended, the other must succeed.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import zlib

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import CODEC_GZIP, encode_message, encode_message_set
from tests.integration.broker import free_port
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    log_end,
    module_broker,
    new_topic,
    raw_entry,
    uri,
)

MESSAGE_MAX_BYTES = 1000

served = module_broker(auto_create_topics_enable="false", message_max_bytes=MESSAGE_MAX_BYTES)


@pytest.fixture
def client(uri):
    with SimpleClient(uri) as c:
        yield c


GOOD = encode_message(b"good")
GZIPPED = encode_message_set([b"in", b"side"], codec=CODEC_GZIP)

INVALID_SETS = {
    "bad crc": raw_entry(b"payload", crc=zlib.crc32(b"payload") ^ 1),
    "bad crc v0": raw_entry(b"payload", magic=0, crc=0),
    "crc of a wrapper": GZIPPED[:-1] + bytes([GZIPPED[-1] ^ 0xFF]),
    "magic 2": raw_entry(magic=2),
    "magic -1": raw_entry(magic=-1),
    "codec 3": raw_entry(attributes=3),
    "attribute bit 2": raw_entry(attributes=0x04),
    "attribute bit 7": raw_entry(attributes=0x80),
    "attribute bit 7 with gzip": raw_entry(GZIPPED[10:], attributes=0x81),
    "length 4": struct.pack(">ib", 4, 1) + b"\0\0\0",
    "length 0": struct.pack(">i", 0) + GOOD,
    "length -1": struct.pack(">i", -1) + GOOD,
    "length 5 with magic 1": struct.pack(">ibI", 5, 1, 0),
    "partial trailing entry": GOOD + GOOD[:7],
    "partial length field": GOOD + GOOD[:2],
    "length past the end": raw_entry(b"short", length=40),
    "valid entries then a bad one": GOOD + GOOD + raw_entry(b"p", crc=0) + GOOD,
}


def _produce_next_to_a_good_set(client: SimpleClient, message_set: bytes) -> tuple:
    """Produce ``message_set`` to partition 0 and a valid set to partition 1, in one request."""
    topic = new_topic()
    client.create_topic(topic, 2)
    before = encode_message_set([b"already", b"there"])
    client.produce(topic, 0, before)
    results = client.produce_many([(topic, 0, message_set), (topic, 1, GOOD)],
                                  raise_on_error=False)
    return topic, before, results


@pytest.mark.parametrize("name", INVALID_SETS)
def test_invalid_message_appends_nothing_of_that_partition(client, name):
    topic, before, (bad, good) = _produce_next_to_a_good_set(client, INVALID_SETS[name])
    assert (bad.partition, bad.error_code, bad.base_offset, bad.log_end_offset) == (
        0, ErrorCode.INVALID_MESSAGE, -1, -1)
    assert (good.partition, good.error_code, good.base_offset, good.log_end_offset) == (
        1, ErrorCode.NONE, 0, len(GOOD))
    assert log_end(client, topic, 0) == len(before)
    assert bytes(client.fetch(topic, 0, 0, 1 << 16).message_set) == before
    # The partition still takes valid appends where it stopped.
    assert client.produce(topic, 0, GOOD).base_offset == len(before)


def _entry_of_length(length: int) -> bytes:
    return encode_message(b"x" * (length - 6))


def test_message_max_bytes_of_the_broker(client):
    topic = new_topic()
    client.create_topic(topic, 2)
    largest = _entry_of_length(MESSAGE_MAX_BYTES)
    assert client.produce(topic, 0, largest).log_end_offset == MESSAGE_MAX_BYTES + 4
    too_big, good = client.produce_many(
        [(topic, 0, GOOD + _entry_of_length(MESSAGE_MAX_BYTES + 1)), (topic, 1, GOOD)],
        raise_on_error=False)
    assert (too_big.error_code, too_big.base_offset, too_big.log_end_offset) == (
        ErrorCode.MESSAGE_TOO_LARGE, -1, -1)
    assert good.error_code == ErrorCode.NONE
    assert log_end(client, topic, 0) == MESSAGE_MAX_BYTES + 4


def test_max_message_bytes_of_a_topic(client):
    small, large = new_topic(), new_topic()
    client.create_topic(small, 1, {"max.message.bytes": "100"})
    client.create_topic(large, 1, {"max.message.bytes": "3000"})
    assert client.produce(small, 0, _entry_of_length(100)).error_code == ErrorCode.NONE
    r = client.produce(small, 0, _entry_of_length(101), raise_on_error=False)
    assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert log_end(client, small, 0) == 104
    # The topic's setting overrides the broker's message.max.bytes both ways.
    assert client.produce(large, 0, _entry_of_length(3000)).error_code == ErrorCode.NONE
    r = client.produce(large, 0, _entry_of_length(3001), raise_on_error=False)
    assert r.error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_a_wrapper_counts_by_its_own_length(client):
    topic = new_topic()
    client.create_topic(topic, 1, {"max.message.bytes": "200"})
    # 100 messages compress to one small wrapper: accepted.
    wrapper = encode_message_set([b"same payload"] * 100, codec=CODEC_GZIP)
    assert len(wrapper) - 4 <= 200
    assert client.produce(topic, 0, wrapper).log_end_offset == len(wrapper)


def test_unknown_topic_is_not_created_when_auto_create_is_off(client):
    topic = new_topic("nope")
    r = client.produce(topic, 0, GOOD, raise_on_error=False)
    assert (r.error_code, r.base_offset, r.log_end_offset) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
    assert client.metadata([topic]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    existing = new_topic()
    client.create_topic(existing, 1)
    results = client.produce_many(
        [(topic, 0, GOOD), (existing, 0, GOOD), (existing, 1, GOOD)], raise_on_error=False)
    assert [r.error_code for r in results] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_produce_acks_minus_one_with_errors(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    r = client.produce(topic, 0, INVALID_SETS["bad crc"], acks=-1, raise_on_error=False)
    assert r.error_code == ErrorCode.INVALID_MESSAGE
    assert client.produce(topic, 0, GOOD, acks=-1).log_end_offset == len(GOOD)


# A broker that refuses to start.


def _serve(tmp_path, *settings: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "hostbroker", "serve"]
    for setting in settings:
        args += ["--set", setting]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


def _assert_refused(result: subprocess.CompletedProcess, *names: str) -> None:
    output = (result.stdout + result.stderr).strip()
    assert result.returncode != 0, output
    assert len(output.splitlines()) == 1, output
    for name in names:
        assert name in output, output


def _usable(tmp_path) -> list[str]:
    return [f"listeners=tcp://127.0.0.1:{free_port()},unix://{tmp_path}/hb.sock",
            f"log.dirs={tmp_path}/logs", "http.listeners="]


def test_refuses_an_unknown_key(tmp_path):
    _assert_refused(_serve(tmp_path, *_usable(tmp_path), "no.such.key=1"), "no.such.key")
    assert not os.path.exists(tmp_path / "logs")


@pytest.mark.parametrize("setting", ["num.partitions=abc", "num.partitions=0",
                                     "auto.create.topics.enable=maybe", "max.connections=-5"])
def test_refuses_a_bad_value(tmp_path, setting):
    _assert_refused(_serve(tmp_path, *_usable(tmp_path), setting), setting.split("=")[0])


def test_refuses_a_listener_it_cannot_bind(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(tmp_path, f"listeners=tcp://127.0.0.1:{port},unix://{tmp_path}/hb.sock",
                        f"log.dirs={tmp_path}/logs")
    _assert_refused(result, f"127.0.0.1:{port}")


def test_refuses_an_unusable_log_dir(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a regular file")
    result = _serve(tmp_path, _usable(tmp_path)[0], f"log.dirs={not_a_dir}")
    _assert_refused(result, str(not_a_dir))
    assert not_a_dir.read_text() == "a regular file"
