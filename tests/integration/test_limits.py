"""Request limits against a real broker: hostile requests get an error, never a dead worker.

Each test sends what a hostile client would (oversized strings echoed into
answers, fetches whose answer would pass 2 GiB, requests of millions of
entries, answers amplified from small requests) and checks the answer, that
no worker was replaced and that the broker still serves a normal request.
The store's own limits (offset commits that must replay after a restart,
compaction) are in test_limits_offsets.py.
"""

from __future__ import annotations

import struct
import time

import pytest

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import count_entries, encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    RawSocket,
    module_broker,
    new_topic,
    uri,
)

FETCH_MAX_BYTES = 3 * 1024 * 1024
RESPONSE_MAX_BYTES = 2 * 1024 * 1024
MAX_ENTRIES = 2000

served = module_broker(fetch_max_bytes=FETCH_MAX_BYTES, response_max_bytes=RESPONSE_MAX_BYTES,
                       request_max_entries=MAX_ENTRIES)


@pytest.fixture
def client(uri):
    with SimpleClient(uri) as c:
        yield c


@pytest.fixture
def unchanged_workers(served):
    """The broker's workers before the test; after it, none may have been replaced."""
    before = served.workers()
    yield
    assert served.workers() == before, served.log()
    with SimpleClient(served.unix) as c:
        assert c.metadata().broker_id == 0


def answer_on_raw_socket(uri_: str, request: api.Request, correlation_id: int = 77) -> bytes:
    with RawSocket(uri_) as sock:
        sock.send(api.encode_request(request, correlation_id))
        return sock.read_frame()


def assert_error_frame_and_close(uri_: str, request_frame: bytes, correlation_id: int,
                                 code: ErrorCode, within_s: float = 10.0) -> None:
    started = time.monotonic()
    with RawSocket(uri_, timeout=within_s) as sock:
        sock.send(request_frame)
        sock.assert_error_frame(correlation_id, code)
    assert time.monotonic() - started < within_s


# Echoed strings (issue 7, item 2)


def test_delete_topic_with_the_longest_name_is_answered(uri, unchanged_workers):
    name = "d" * 32759
    frame = answer_on_raw_socket(uri, api.DeleteTopicRequest(name))
    corr, response = api.decode_response(api.ApiKey.DELETE_TOPIC, frame)
    assert (corr, response.error_code) == (77, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert len(response.error_message.encode()) <= api.MAX_ECHOED_TEXT
    assert response.error_message.startswith("no topic ddd")


@pytest.mark.parametrize("name", ["x" * 32767, "bad name " + "é" * 16000, "?" * 250])
def test_create_topic_with_a_long_invalid_name_is_answered(uri, unchanged_workers, name):
    frame = answer_on_raw_socket(uri, api.CreateTopicRequest(name, 1))
    _, response = api.decode_response(api.ApiKey.CREATE_TOPIC, frame)
    assert response.error_code == ErrorCode.INVALID_TOPIC
    assert 0 < len(response.error_message.encode()) <= api.MAX_ECHOED_TEXT


def test_create_topic_with_long_bad_configs_is_answered(client, unchanged_workers):
    configs = {"segment.bytes": "9" * 30000}
    response = client.create_topic(new_topic(), 1, configs, raise_on_error=False)
    assert response.error_code == ErrorCode.INVALID_CONFIG
    assert len(response.error_message.encode()) <= api.MAX_ECHOED_TEXT


# Reserved names


def test_names_starting_with_two_underscores_are_reserved(client, unchanged_workers):
    for name in ("__consumer_offsets", "__x"):
        response = client.create_topic(name, 1, raise_on_error=False)
        assert response.error_code == ErrorCode.INVALID_TOPIC
        assert "reserved" in response.error_message
        produced = client.produce(name, 0, encode_message_set([b"a"]), raise_on_error=False)
        assert produced.error_code == ErrorCode.INVALID_TOPIC
        assert client.metadata([name]).topics[0].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # One underscore is an ordinary name.
    assert client.create_topic("_" + new_topic(), 1).error_code == ErrorCode.NONE


# FETCH answers (items 3 and 14)


def _fill(client: SimpleClient, topic: str, total: int) -> int:
    sets = encode_message_set([b"v" * 100_000] * 5)
    end = 0
    while end < total:
        end = client.produce(topic, 0, sets).log_end_offset
    return end


def test_fetch_answer_is_bounded_by_fetch_max_bytes(client, unchanged_workers):
    topic = new_topic()
    end = _fill(client, topic, 2 * 1024 * 1024)
    # 1,500 entries of 1 MB on one partition: 1.5 GB asked for, one 3 MiB budget.
    entries = [(topic, 0, 0, 1_000_000)] * 1500
    results = client.fetch_many(entries)
    sizes = [len(r.message_set) for r in results]
    assert sum(sizes) <= FETCH_MAX_BYTES
    assert sizes[:4] == [1_000_000] * 3 + [FETCH_MAX_BYTES - 3_000_000]
    assert sizes[4:] == [0] * (len(sizes) - 4)
    assert all(r.error_code == ErrorCode.NONE and r.log_end_offset == end for r in results)
    # A partition past the budget still reports its own error.
    results = client.fetch_many([(topic, 0, 0, 1_000_000)] * 4 + [(topic, 0, end + 1, 10)],
                               raise_on_error=False)
    assert results[-1].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_fetch_whose_answer_would_pass_two_gib_is_answered(served, unchanged_workers):
    """The case that killed the handler: 2,200 entries of 1 MB (a 44 KB request)."""
    with SimpleClient(served.unix) as client:
        topic = new_topic()
        _fill(client, topic, 1_100_000)
        results = client.fetch_many([(topic, 0, 0, 2**31 - 1)] * MAX_ENTRIES)
    assert sum(len(r.message_set) for r in results) <= FETCH_MAX_BYTES
    _, whole = count_entries(results[0].message_set)
    assert whole > 0


@pytest.mark.parametrize("missing", ["topic", "partition", "all"])
def test_long_poll_with_only_errors_answers_at_once(client, unchanged_workers, missing):
    topic = new_topic()
    client.create_topic(topic, 1)
    parts = {"topic": [(new_topic("missing"), 0, 0, 1000)],
             "partition": [(topic, 5, 0, 1000)],
             "all": [(new_topic("missing"), 0, 0, 1000), (topic, 1, 0, 1000),
                     (topic, 0, 0, 0)]}[missing]
    started = time.monotonic()
    results = client.fetch_many(parts, max_wait_ms=10_000, min_bytes=1, raise_on_error=False)
    assert time.monotonic() - started < 2.0
    assert all(r.error_code != ErrorCode.NONE for r in results)


def test_long_poll_with_one_good_partition_still_waits(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    started = time.monotonic()
    client.fetch_many([(topic, 0, 0, 1000), (new_topic("missing"), 0, 0, 1000)],
                      max_wait_ms=700, min_bytes=1, raise_on_error=False)
    assert 0.6 <= time.monotonic() - started < 5.0


# Entries per request (items 3 and 14)


def _requests_with(n: int, topic: str) -> dict[str, api.Request]:
    return {
        "produce": api.ProduceRequest(1, 1000, tuple(
            api.ProducePartition(topic, 0, b"") for _ in range(n))),
        "fetch": api.FetchRequest(0, 0, tuple(
            api.FetchPartition(topic, 0, 0, 10) for _ in range(n))),
        "metadata": api.MetadataRequest(tuple(topic for _ in range(n))),
        "create_topic": api.CreateTopicRequest(new_topic(), 1, tuple(
            api.TopicConfigEntry(f"k{i}", "1") for i in range(n))),
        "offset_commit": api.OffsetCommitRequest("g", tuple(
            api.OffsetCommitPartition(topic, 0, 1) for _ in range(n))),
        "offset_fetch": api.OffsetFetchRequest("g", tuple(
            api.OffsetFetchPartition(topic, 0) for _ in range(n))),
    }


@pytest.mark.parametrize("kind", ["produce", "fetch", "metadata", "create_topic",
                                  "offset_commit", "offset_fetch"])
def test_more_entries_than_request_max_entries_get_an_error_frame(served, unchanged_workers,
                                                                   kind):
    topic = new_topic()
    with SimpleClient(served.unix) as client:
        client.create_topic(topic, 1)
        # At the limit: answered normally.
        answer = client.request(_requests_with(MAX_ENTRIES, topic)[kind])
        assert answer is not None
    frame = api.encode_request(_requests_with(MAX_ENTRIES + 1, topic)[kind], 91)
    assert_error_frame_and_close(served.unix, frame, 91, ErrorCode.INVALID_REQUEST)


def test_metadata_naming_four_million_topics_is_refused_at_once(served, unchanged_workers):
    count = 4_000_000
    body = struct.pack(">i", count) + b"\x00\x01a" * count
    rest = struct.pack(">hhih", api.ApiKey.METADATA, 0, 5, 0) + body
    frame = struct.pack(">i", len(rest)) + rest
    assert_error_frame_and_close(served.tcp, frame, 5, ErrorCode.INVALID_REQUEST, within_s=3.0)


# Answer size (item 4)


def test_an_answer_over_response_max_bytes_is_an_error_frame(served, unchanged_workers):
    topic, group = new_topic(), new_topic("group")
    with SimpleClient(served.unix) as client:
        client.create_topic(topic, 1)
        client.offset_commit(group, [(topic, 0, 1, "m" * 4096)])
        # 1,000 x 4 KiB answered from a 20 KB request: over the 2 MiB limit.
        request = api.OffsetFetchRequest(group, (api.OffsetFetchPartition(topic, 0),) * 1000)
        assert client.offset_fetch(group, [(topic, 0)])[0].metadata == "m" * 4096
    assert_error_frame_and_close(served.unix, api.encode_request(request, 3), 3,
                                 ErrorCode.INVALID_REQUEST)
    # Under the limit the same request is answered.
    request = api.OffsetFetchRequest(group, (api.OffsetFetchPartition(topic, 0),) * 300)
    _, response = api.decode_response(api.ApiKey.OFFSET_FETCH,
                                      answer_on_raw_socket(served.unix, request))
    assert {(r.offset, r.metadata) for r in response.partitions} == {(1, "m" * 4096)}
    assert len(response.partitions) == 300


def test_metadata_longer_than_offset_metadata_max_bytes_is_refused(client, unchanged_workers):
    topic, group = new_topic(), new_topic("group")
    client.create_topic(topic, 2)
    results = client.offset_commit(group, [(topic, 0, 5, "a" * 4096), (topic, 1, 6, "b" * 4097)],
                                   raise_on_error=False)
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
    fetched = client.offset_fetch(group, [(topic, 0), (topic, 1)])
    assert [(r.offset, r.metadata) for r in fetched] == [(5, "a" * 4096), (-1, "")]
    # Counted in UTF-8 bytes: 2,049 two-byte characters are 4,098 bytes.
    (result,) = client.offset_commit(group, [(topic, 1, 7, "é" * 2049)], raise_on_error=False)
    assert result.error_code == ErrorCode.INVALID_REQUEST


def test_metadata_naming_a_wide_topic_many_times_is_refused_before_it_is_built(
        served, unchanged_workers):
    topic = new_topic()
    with SimpleClient(served.unix) as client:
        client.metadata()  # (a connection's first answer is bounded by its setup timeout)
        client.create_topic(topic, 500)
        # Once: about 40 KB. 2,000 times: about 80 MB, from a request of 30 KB.
        (described,) = client.metadata([topic]).topics
        assert len(described.partitions) == 500
        assert len(client.metadata([topic] * 40).topics) == 40
    frame = api.encode_request(api.MetadataRequest((topic,) * MAX_ENTRIES), 8)
    assert_error_frame_and_close(served.unix, frame, 8, ErrorCode.INVALID_REQUEST, within_s=3.0)
