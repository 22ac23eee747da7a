"""METADATA, CREATE_TOPIC, DELETE_TOPIC, OFFSET_COMMIT and OFFSET_FETCH against a real broker.

Most tests share one broker; those that restart a broker start their own
(``make_broker``) on a root of their own and restart it on the same root.
"""

from __future__ import annotations

import json
import os

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    log_end,
    module_broker,
    new_topic,
    segment_bases,
    uri,
)

served = module_broker()


@pytest.fixture
def client(uri):
    with SimpleClient(uri) as c:
        yield c


# METADATA


def test_metadata_lists_this_broker(served, client):
    response = client.metadata()
    assert response.broker_id == 0
    assert response.brokers == (
        api.MetadataBroker(0, "127.0.0.1", served.port, served.unix_path),)


def test_metadata_all_and_named_topics(served, client):
    one, two = new_topic(), new_topic()
    client.create_topic(one, 2)
    client.create_topic(two, 1)
    end = client.produce(one, 1, encode_message_set([b"abc", b"de"])).log_end_offset

    everything = {t.topic: t for t in client.metadata().topics}
    assert {one, two} <= set(everything)
    named = client.metadata([two, one]).topics
    assert [t.topic for t in named] == [two, one]
    assert named[1] == everything[one]

    described = everything[one]
    assert described.error_code == ErrorCode.NONE
    log_dir = os.path.join(served.root, "logs")
    assert described.partitions == (
        api.MetadataPartition(0, ErrorCode.NONE, 0, 0, 0, log_dir),
        api.MetadataPartition(1, ErrorCode.NONE, 0, 0, end, log_dir),
    )
    assert os.path.isdir(os.path.join(log_dir, f"{one}_1"))


def test_metadata_unknown_topic(client):
    known, missing = new_topic(), new_topic("missing")
    client.create_topic(known, 1)
    topics = client.metadata([missing, known]).topics
    assert [(t.topic, t.error_code) for t in topics] == [
        (missing, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (known, ErrorCode.NONE)]
    assert topics[0].partitions == ()
    # Asking does not create it.
    assert missing not in {t.topic for t in client.metadata().topics}


# CREATE_TOPIC / DELETE_TOPIC


def test_create_topic_then_it_exists(client):
    topic = new_topic()
    response = client.create_topic(topic, 4, {"segment.bytes": "4096", "retention.ms": "60000"})
    assert response.error_code == ErrorCode.NONE
    (described,) = client.metadata([topic]).topics
    assert [p.partition for p in described.partitions] == [0, 1, 2, 3]
    assert all((p.log_start_offset, p.log_end_offset) == (0, 0) for p in described.partitions)
    again = client.create_topic(topic, 4, raise_on_error=False)
    assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    again = client.create_topic(topic, 1, raise_on_error=False)
    assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert len(client.metadata([topic]).topics[0].partitions) == 4


def test_longest_and_odd_valid_topic_names(served):
    # Fixed names: this test runs once, over the Unix socket.
    with SimpleClient(served.unix) as client:
        for name in ("x" * 249, "A.b-C_9", "_", "..."):
            assert client.create_topic(name, 1).error_code == ErrorCode.NONE, name
            assert client.metadata([name]).topics[0].error_code == ErrorCode.NONE


@pytest.mark.parametrize("name", [
    "", ".", "..", "x" * 250, "a/b", "a b", "a:b", "tab\t", "é", "a*", "../up", "a\x00b",
])
def test_create_topic_refuses_bad_names(client, name):
    response = client.create_topic(name, 1, raise_on_error=False)
    assert response.error_code == ErrorCode.INVALID_TOPIC
    assert name not in {t.topic for t in client.metadata().topics}


@pytest.mark.parametrize("partitions", [0, -1, -(2**31)])
def test_create_topic_refuses_partition_counts_below_one(client, partitions):
    topic = new_topic()
    response = client.create_topic(topic, partitions, raise_on_error=False)
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert client.metadata([topic]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("configs", [
    {"no.such.config": "1"},
    {"log.segment.bytes": "1024"},  # a broker key, not a topic key
    {"segment.bytes": "abc"},
    {"segment.bytes": "63"},
    {"segment.bytes": str(2**31)},
    {"max.message.bytes": "5"},
    {"flush.messages": "0"},
    {"retention.ms": "-2"},
    {"retention.bytes": "1.5"},
    {"segment.bytes": ""},
    {"segment.bytes": "1024", "flush.ms": "soon"},
])
def test_create_topic_refuses_bad_configs(client, configs):
    topic = new_topic()
    response = client.create_topic(topic, 1, configs, raise_on_error=False)
    assert response.error_code == ErrorCode.INVALID_CONFIG
    assert client.metadata([topic]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topic_accepts_every_topic_config_key(client):
    topic = new_topic()
    configs = {"segment.bytes": "64", "retention.ms": "-1", "retention.bytes": "-1",
               "flush.messages": "1", "flush.ms": "1", "max.message.bytes": "6"}
    assert client.create_topic(topic, 1, configs).error_code == ErrorCode.NONE


def test_delete_topic_then_unknown(client):
    topic = new_topic()
    client.create_topic(topic, 2)
    client.produce(topic, 0, encode_message_set([b"going"]))
    assert client.delete_topic(topic).error_code == ErrorCode.NONE
    assert client.metadata([topic]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.delete_topic(topic, raise_on_error=False).error_code == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    r = client.fetch(topic, 0, 0, 1000, raise_on_error=False)
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_unknown_topic(client):
    response = client.delete_topic(new_topic("missing"), raise_on_error=False)
    assert response.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_recreated_topic_starts_empty(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    client.produce(topic, 0, encode_message_set([b"old"] * 10))
    client.delete_topic(topic)
    client.create_topic(topic, 2)
    (described,) = client.metadata([topic]).topics
    assert [(p.log_start_offset, p.log_end_offset) for p in described.partitions] == [(0, 0)] * 2
    fetched = client.fetch(topic, 0, 0, 1000)
    assert bytes(fetched.message_set) == b""
    assert client.produce(topic, 0, encode_message_set([b"new"])).base_offset == 0


# OFFSET_COMMIT / OFFSET_FETCH


def test_offset_commit_and_fetch_round_trip(client):
    topic, group = new_topic(), new_topic("group")
    client.create_topic(topic, 3)
    committed = client.offset_commit(group, [(topic, 0, 110, "first"), (topic, 2, 2**40, None)])
    assert [(r.topic, r.partition, r.error_code) for r in committed] == [
        (topic, 0, ErrorCode.NONE), (topic, 2, ErrorCode.NONE)]
    fetched = client.offset_fetch(group, [(topic, 2), (topic, 1), (topic, 0)])
    assert [(r.partition, r.offset, r.error_code) for r in fetched] == [
        (2, 2**40, ErrorCode.NONE), (1, -1, ErrorCode.NONE), (0, 110, ErrorCode.NONE)]
    assert fetched[2].metadata == "first"

    client.offset_commit(group, [(topic, 0, 220, "second")])
    (again,) = client.offset_fetch(group, [(topic, 0)])
    assert (again.offset, again.metadata) == (220, "second")
    # Groups are separate.
    (other,) = client.offset_fetch(new_topic("group"), [(topic, 0)])
    assert (other.offset, other.error_code) == (-1, ErrorCode.NONE)


def test_offset_fetch_never_committed(client):
    group, topic = new_topic("group"), new_topic()
    client.create_topic(topic, 1)
    (result,) = client.offset_fetch(group, [(topic, 0)])
    assert (result.topic, result.partition, result.offset, result.error_code) == (
        topic, 0, -1, ErrorCode.NONE)


def _commit_some(client: SimpleClient, group: str, topic: str) -> None:
    client.create_topic(topic, 2)
    client.offset_commit(group, [(topic, 0, 1234, "kept"), (topic, 1, 99, None)])
    client.offset_commit(group, [(topic, 0, 5678, "kept twice")])


def _assert_committed(client: SimpleClient, group: str, topic: str) -> None:
    fetched = client.offset_fetch(group, [(topic, 0), (topic, 1)])
    assert [(r.offset, r.error_code) for r in fetched] == [
        (5678, ErrorCode.NONE), (99, ErrorCode.NONE)]
    # A null metadata may come back as null or as the empty string.
    assert (fetched[0].metadata, fetched[1].metadata or "") == ("kept twice", "")


@pytest.mark.parametrize("ending", ["stop", "kill_tree"])
def test_committed_offsets_survive_a_restart(make_broker, tmp_path, ending):
    root = tmp_path / "b"
    root.mkdir()
    group, topic = new_topic("group"), new_topic()
    broker = make_broker(root=root)
    with broker.client() as c:
        _commit_some(c, group, topic)
    if ending == "stop":
        assert broker.stop() == 0
    else:
        broker.kill_tree()
    broker = make_broker(root=root)
    for uri_ in (broker.unix, broker.tcp):
        with broker.client(uri_) as c:
            _assert_committed(c, group, topic)


def test_topic_configs_survive_a_restart(make_broker, tmp_path):
    root = tmp_path / "b"
    root.mkdir()
    topic = new_topic("cfg")
    broker = make_broker(root=root)
    with broker.client() as c:
        c.create_topic(topic, 2, {"segment.bytes": "128", "max.message.bytes": "200"})
        c.produce(topic, 0, encode_message_set([b"a" * 50]))
    assert broker.stop() == 0

    broker = make_broker(root=root)
    data = encode_message_set([b"b" * 90])  # 100 bytes: each set rolls a new segment
    with broker.client(broker.tcp) as c:
        assert log_end(c, topic, 0) == 60
        for _ in range(3):
            c.produce(topic, 0, data)
        assert segment_bases(c, topic, 0) == [0, 60, 160, 260]
        too_big = c.produce(topic, 1, encode_message_set([b"c" * 195]), raise_on_error=False)
        assert too_big.error_code == ErrorCode.MESSAGE_TOO_LARGE
    with open(os.path.join(root, "logs", f"{topic}_0", "partition.json")) as f:
        stored = json.dumps(json.load(f))
    assert "segment.bytes" in stored and "128" in stored
