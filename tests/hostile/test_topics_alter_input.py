"""Standing cases: hostile ALTER_TOPIC, DESCRIBE_TOPIC_CONFIGS and
LIST_OFFSET_GROUPS (issue 37).

Whoever can reach a listener sends these with any bytes and any values: a
flag out of range, a topic name that climbs out of the log dir, a value of
a million digits, more keys than the broker takes, a partition count past
every limit. Each is refused (an error frame and a close for what cannot be
decoded, an error code and one line for the rest), quickly, without a
worker replaced or a file outside the log dir touched; a partition.json
replaced by a link is never followed. A real broker, raw sockets.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.protocol import topics_admin as ta
from tests.integration.broker import Broker
from tests.integration.wire_helpers import RawSocket, raw_frame, stop_or_kill
from tests.protocol.wire import array, i32, string


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("alter"), request_max_entries=1000,
                    max_partitions_per_topic=16).start()
    with broker.client() as client:
        client.create_topic("kept", 2, {"flush.ms": "500"})
    yield broker
    stop_or_kill(broker)


def alter_body(topic: str, partitions: int = -1, sets=(), deletes=(), flag: int = 0) -> bytes:
    return (string(topic) + i32(partitions)
            + array(*(string(k) + string(v) for k, v in sets))
            + array(*(string(k) for k in deletes)) + flag.to_bytes(1, "big", signed=True))


def answer(broker, frame: bytes, api_key: int, cls):
    with RawSocket(broker.unix) as sock:
        started = time.monotonic()
        sock.send(frame)
        raw = sock.read_frame()
        assert time.monotonic() - started < 5
    return ta.decode_response(raw, cls)[1]


def test_undecodable_requests_get_an_error_frame_and_a_close(served):
    workers = served.workers()
    cases = [
        ("validate_only 7", raw_frame(19, 5, alter_body("kept", 3, flag=7))),
        ("validate_only -1", raw_frame(19, 5, alter_body("kept", 3, flag=-1))),
        ("a body cut short", raw_frame(19, 5, alter_body("kept", 3)[:-3])),
        ("bytes left over", raw_frame(19, 5, alter_body("kept", 3) + b"\0")),
        ("a key count of 2^31-1", raw_frame(19, 5, string("kept") + i32(3) + i32(2**31 - 1))),
        ("more keys than request.max.entries", raw_frame(19, 5, alter_body(
            "kept", deletes=["flush.ms"] * 1001))),
        ("a null topic", raw_frame(19, 5, i32(-1)[2:] + i32(3) + array() + array() + b"\0")),
        ("a configs request of 5000 topics", raw_frame(21, 5, array(*[string("t")] * 5000))),
        ("LIST_OFFSET_GROUPS with a body", raw_frame(20, 5, b"\0")),
        ("version 1", raw_frame(19, 5, alter_body("kept", 3), api_version=1)),
    ]
    for what, frame in cases:
        with RawSocket(served.unix) as sock:
            sock.send(frame)
            code = (ErrorCode.UNSUPPORTED_VERSION if what == "version 1"
                    else ErrorCode.INVALID_REQUEST)
            try:
                sock.assert_error_frame(5, code)
            except AssertionError as e:
                raise AssertionError(f"{what}: {e}") from None
    assert served.workers() == workers  # nothing replaced


def test_hostile_values_are_answered_with_a_code_and_one_line(served):
    log_dir = served.settings["log.dirs"]
    outside = os.path.join(os.path.dirname(log_dir), "outside")
    before = sorted(os.listdir(os.path.dirname(log_dir)))
    cases = [
        ("../outside", alter_body("../outside", 3), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("a NUL in the name", alter_body("kept\0", 3), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("2^31-1 partitions", alter_body("kept", 2**31 - 1), ErrorCode.INVALID_PARTITIONS),
        ("-2^31 partitions", alter_body("kept", -(2**31)), ErrorCode.INVALID_PARTITIONS),
        ("a million digits", alter_body("kept", sets=[("retention.ms", "9" * 30000)]),
         ErrorCode.INVALID_CONFIG),
        ("a negative segment", alter_body("kept", sets=[("segment.bytes", "-1")]),
         ErrorCode.INVALID_CONFIG),
        ("a key of 30000 bytes", alter_body("kept", sets=[("k" * 30000, "1")]),
         ErrorCode.INVALID_CONFIG),
        ("a key set twice", alter_body("kept", sets=[("flush.ms", "1"), ("flush.ms", "2")]),
         ErrorCode.INVALID_CONFIG),
        ("a key deleted twice", alter_body("kept", deletes=["flush.ms", "flush.ms"]),
         ErrorCode.INVALID_CONFIG),
        ("a reserved name", alter_body("__offsets", 3), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    for what, body, code in cases:
        got = answer(served, raw_frame(19, 9, body), 19, ta.AlterTopicResponse)
        assert got.error_code == code, (what, got)
        assert got.error_message and "\n" not in got.error_message, what
        assert len(got.error_message.encode()) <= 1024, what
    assert sorted(os.listdir(os.path.dirname(log_dir))) == before
    assert not os.path.exists(outside)
    with served.client() as client:
        (kept,) = client.describe_topic_configs(["kept"])
        assert {e.key: e.value for e in kept.configs} == {"flush.ms": "500"}
        assert len(client.metadata(["kept"]).topics[0].partitions) == 2
        # a name that is not a topic is answered as unknown, not looked for on disk
        (odd,) = client.describe_topic_configs(["../../etc"])
        assert odd.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and odd.configs == ()


def test_a_linked_partition_file_is_not_followed(served, tmp_path):
    """A partition.json replaced by a link to a file elsewhere: reading the
    topic's config refuses it, and so does an ALTER_TOPIC (STORAGE_ERROR,
    naming the link), the file it points at read and written by neither."""
    with served.client() as client:
        client.create_topic("linked", 1, {"flush.ms": "700"})
    path = os.path.join(served.settings["log.dirs"], "linked_0", "partition.json")
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"topic": "linked", "partition": 0, "partitions": 1,
                                  "config": {"flush.ms": "1"}}))
    before = target.read_bytes()
    os.unlink(path)
    os.symlink(target, path)
    with served.client() as client:
        (seen,) = client.describe_topic_configs(["linked"])
        assert seen.error_code == ErrorCode.STORAGE_ERROR and seen.configs == ()
        refused = client.alter_topic("linked", set_configs={"flush.ms": "900"},
                                     raise_on_error=False)
        assert refused.error_code == ErrorCode.STORAGE_ERROR
        assert "is a symbolic link (not followed)" in refused.error_message
        (seen,) = client.describe_topic_configs(["linked"])
        assert seen.error_code == ErrorCode.STORAGE_ERROR
    assert target.read_bytes() == before
    assert os.path.islink(path)


def test_many_alters_at_once_leave_the_topic_whole(served):
    """Ten connections growing the same topic by one each, pipelined: every
    answer is NONE or a refusal to shrink, and the topic ends with the
    largest count asked for, every partition.json saying so."""
    with served.client() as client:
        client.create_topic("raced", 1)
    socks = [RawSocket(served.unix) for _ in range(10)]
    try:
        for n, sock in enumerate(socks):
            sock.send(raw_frame(19, n, alter_body("raced", 2 + n)))
        codes = [ta.decode_response(sock.read_frame(), ta.AlterTopicResponse)[1].error_code
                 for sock in socks]
    finally:
        for sock in socks:
            sock.sock.close()
    assert set(codes) <= {ErrorCode.NONE, ErrorCode.INVALID_PARTITIONS}
    with served.client() as client:
        assert len(client.metadata(["raced"]).topics[0].partitions) == 11
    root = served.settings["log.dirs"]
    for p in range(11):
        with open(os.path.join(root, f"raced_{p}", "partition.json")) as f:
            assert json.load(f)["partitions"] == 11
