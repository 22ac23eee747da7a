"""PRODUCE, FETCH, OFFSETS and pipelining against a real broker (docs/spec/protocol.md, "APIs").

One broker serves the whole module (``num.partitions=3`` for auto-created
topics, retention checked every 100 ms for the log-start tests); every test
uses topics of its own. Tests that take ``uri`` run over TCP and the Unix socket.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from hostbroker.client.connection import BrokerConnection
from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    encode_message,
    encode_message_set,
    iter_messages,
)
from hostbroker.protocol import api
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    FAR_FUTURE_MS,
    RawSocket,
    created_topic,
    log_end,
    module_broker,
    new_topic,
    produce_request,
    read_log,
    segment_bases,
    uri,
    wait_for,
)

served = module_broker(num_partitions=3, log_retention_check_interval_ms=100)


@pytest.fixture
def client(uri):
    with SimpleClient(uri) as c:
        yield c


def payloads(n: int, size: int = 20, tag: str = "m") -> list[bytes]:
    return [f"{tag}{i:06d}".encode().ljust(size, b".") for i in range(n)]


def entry_size(payload: bytes) -> int:
    return len(encode_message(payload))


# PRODUCE


@pytest.mark.parametrize("acks", [1, -1])
def test_produce_offsets_are_byte_positions(client, acks):
    topic = new_topic()
    first = encode_message_set([b"a", b"bb", b"ccc"])
    second = encode_message_set([b"dddd"])
    r1 = client.produce(topic, 0, first, acks=acks)
    assert (r1.error_code, r1.base_offset, r1.log_end_offset) == (ErrorCode.NONE, 0, len(first))
    r2 = client.produce(topic, 0, second, acks=acks)
    assert (r2.base_offset, r2.log_end_offset) == (len(first), len(first) + len(second))

    messages = list(iter_messages(client.fetch(topic, 0, 0, 1 << 16).message_set, 0))
    assert [m.payload for m in messages] == [b"a", b"bb", b"ccc", b"dddd"]
    offset = 0
    for m in messages:
        assert m.offset == offset
        # next = offset + 4 + length, and length = 1 + 1 + 4 + payload for v1.
        assert m.next_offset == offset + 4 + 6 + len(m.payload)
        offset = m.next_offset
    assert offset == r2.log_end_offset == log_end(client, topic, 0)


def test_produce_v0_entries(client):
    topic = new_topic()
    data = encode_message(b"old", magic=0) + encode_message(b"new")
    r = client.produce(topic, 0, data)
    assert r.log_end_offset == len(data) == 4 + 5 + 3 + 4 + 6 + 3
    messages = list(iter_messages(client.fetch(topic, 0, 0, 1000).message_set, 0))
    assert [(m.magic, m.payload, m.next_offset) for m in messages] == [
        (0, b"old", 12), (1, b"new", len(data))]


def test_produce_acks_0_has_no_answer_and_keeps_the_order(uri):
    topic = created_topic(uri)
    data = encode_message_set([b"fire", b"and", b"forget"])
    with BrokerConnection(uri) as conn:
        conn.send(produce_request(topic, 0, data, acks=0))
        metadata_id = conn.send(api.MetadataRequest((topic,)))
        conn.send(produce_request(topic, 0, data, acks=0))
        last_id = conn.send(produce_request(topic, 0, data))
        assert conn.pending == 2
        # receive() checks each answer's correlation id against the one expected.
        metadata = conn.receive(api.ApiKey.METADATA)
        last = conn.receive(api.ApiKey.PRODUCE).partitions[0]
        assert metadata_id + 2 == last_id
    assert metadata.topics[0].error_code == ErrorCode.NONE
    # Produces of one connection to one partition are appended in the order sent.
    assert (last.base_offset, last.log_end_offset) == (2 * len(data), 3 * len(data))
    with SimpleClient(uri) as c:
        assert bytes(c.fetch(topic, 0, 0, 1000).message_set) == data * 3


def test_produce_acks_0_frame_on_raw_socket_gets_no_answer(served):
    topic = new_topic()
    data = encode_message_set([b"x"])
    with RawSocket(served.unix) as raw:
        raw.send(api.encode_request(produce_request(topic, 0, data, acks=0), 41)
                 + api.encode_request(api.MetadataRequest((topic,)), 42))
        correlation_id, metadata = raw.read_response(api.ApiKey.METADATA)
    assert correlation_id == 42
    assert metadata.topics[0].error_code == ErrorCode.NONE


def test_produce_many_partitions_in_one_request(client):
    topic = new_topic()
    client.create_topic(topic, 3)
    sets = {p: encode_message_set(payloads(p + 1, tag=f"p{p}-")) for p in range(3)}
    client.produce(topic, 1, encode_message_set([b"already there"]))
    before = log_end(client, topic, 1)
    results = client.produce_many([(topic, p, sets[p]) for p in (2, 0, 1)])
    assert [(r.topic, r.partition, r.error_code) for r in results] == [
        (topic, 2, 0), (topic, 0, 0), (topic, 1, 0)]
    by_partition = {r.partition: r for r in results}
    for p in range(3):
        base = before if p == 1 else 0
        assert (by_partition[p].base_offset, by_partition[p].log_end_offset) == (
            base, base + len(sets[p]))
        fetched = client.fetch(topic, p, base, 1 << 16).message_set
        assert bytes(fetched) == sets[p]


def test_produce_empty_message_set_appends_nothing(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    client.produce(topic, 0, encode_message_set([b"one"]))
    end = log_end(client, topic, 0)
    r = client.produce(topic, 0, b"")
    assert r.error_code == ErrorCode.NONE
    assert r.log_end_offset == end
    assert log_end(client, topic, 0) == end


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY])
def test_compressed_wrapper_is_stored_and_fetched_as_sent(client, codec):
    topic = new_topic()
    plain = encode_message_set([b"before"])
    wrapper = encode_message_set(payloads(50, size=40), codec=codec)
    client.produce(topic, 0, plain)
    r = client.produce(topic, 0, wrapper)
    assert (r.base_offset, r.log_end_offset) == (len(plain), len(plain) + len(wrapper))
    after = client.produce(topic, 0, encode_message_set([b"after"]))

    fetched = bytes(client.fetch(topic, 0, r.base_offset, 1 << 16).message_set)
    assert fetched.startswith(wrapper)
    messages = list(iter_messages(fetched, r.base_offset))
    assert [m.payload for m in messages] == payloads(50, size=40) + [b"after"]
    inner, last = messages[:50], messages[50]
    assert {(m.offset, m.codec) for m in inner} == {(r.base_offset, codec)}
    assert [m.next_offset for m in inner] == [r.base_offset] * 49 + [r.log_end_offset]
    assert (last.offset, last.codec, last.next_offset) == (
        after.base_offset, CODEC_NONE, after.log_end_offset)


def test_auto_create_uses_num_partitions(client):
    topic = new_topic("auto")
    r = client.produce(topic, 0, encode_message_set([b"hello"]))
    assert r.error_code == ErrorCode.NONE
    (described,) = client.metadata([topic]).topics
    assert described.error_code == ErrorCode.NONE
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    assert [p.log_end_offset for p in described.partitions] == [r.log_end_offset, 0, 0]
    # Partitions beyond the topic's count stay unknown: auto-create is per topic.
    r = client.produce(topic, 3, encode_message_set([b"nope"]), raise_on_error=False)
    assert (r.error_code, r.base_offset, r.log_end_offset) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)


def test_auto_create_on_any_partition_of_the_new_topic(client):
    topic = new_topic("auto")
    r = client.produce(topic, 2, encode_message_set([b"on two"]))
    assert (r.error_code, r.base_offset) == (ErrorCode.NONE, 0)
    assert len(client.metadata([topic]).topics[0].partitions) == 3


def test_appends_on_one_connection_keep_their_order(uri):
    topic = new_topic()
    sets = [encode_message_set(payloads(random.randint(1, 5), tag=f"r{i}-")) for i in range(60)]
    with BrokerConnection(uri) as conn:
        for data in sets:
            conn.send(produce_request(topic, 0, data))
        results = [conn.receive().partitions[0] for _ in sets]
    offset = 0
    for data, result in zip(sets, results):
        assert (result.base_offset, result.log_end_offset) == (offset, offset + len(data))
        offset += len(data)
    with SimpleClient(uri) as c:
        assert read_log(c, topic, 0, 0, offset) == b"".join(sets)


# Pipelining


def test_pipelined_mixed_requests_are_answered_in_order(uri):
    # The requests of one pipeline do not depend on each other: the broker
    # promises the order of answers, not the order in which handlers run them.
    topic, doomed, fresh, group = new_topic(), new_topic(), new_topic(), new_topic("group")
    data = encode_message_set([b"piped"])
    with SimpleClient(uri) as setup:
        setup.create_topic(topic, 2)
        setup.create_topic(doomed, 1)
        setup.produce(topic, 1, data)
        setup.offset_commit(group, [(topic, 1, len(data), "meta")])
    requests = [
        produce_request(topic, 0, data),
        api.FetchRequest(0, 0, (api.FetchPartition(topic, 1, 0, 1000),)),
        api.OffsetsRequest(topic, 1, api.LATEST_TIME, 1),
        produce_request(topic, 0, data, acks=0),
        api.MetadataRequest((topic,)),
        api.OffsetCommitRequest(group, (api.OffsetCommitPartition(topic, 0, 7, None),)),
        api.OffsetFetchRequest(group, (api.OffsetFetchPartition(topic, 1),)),
        api.FetchRequest(0, 0, (api.FetchPartition(topic, 1, 0, 0),)),
        api.CreateTopicRequest(fresh, 1),
        api.DeleteTopicRequest(doomed),
        api.MetadataRequest((new_topic("missing"),)),
    ]
    correlation_ids = random.sample(range(1, 2**31), len(requests))
    answered = [(r, c) for r, c in zip(requests, correlation_ids)
                if not (isinstance(r, api.ProduceRequest) and r.acks == 0)]
    with RawSocket(uri) as raw:
        raw.send(b"".join(api.encode_request(r, c) for r, c in zip(requests, correlation_ids)))
        answers = [raw.read_response(r.API_KEY) for r, _ in answered]
    assert [c for c, _ in answers] == [c for _, c in answered]
    produced, fetched, offsets, metadata, committed, read_back, bad_fetch, created, deleted, \
        missing = [a for _, a in answers]
    assert produced.partitions[0].base_offset == 0
    assert bytes(fetched.partitions[0].message_set) == data
    assert offsets.offsets == (len(data),)
    assert [p.partition for p in metadata.topics[0].partitions] == [0, 1]
    assert committed.partitions[0].error_code == ErrorCode.NONE
    (stored,) = read_back.partitions
    assert (stored.offset, stored.metadata) == (len(data), "meta")
    assert bad_fetch.partitions[0].error_code == ErrorCode.INVALID_FETCH_SIZE
    assert (created.error_code, deleted.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert missing.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_many_pipelined_requests_in_flight(uri):
    topic = new_topic()
    with BrokerConnection(uri) as conn:
        sent = []
        for i in range(300):
            if i % 3 == 0:
                request = produce_request(topic, 0, encode_message_set([b"%d" % i]))
            elif i % 3 == 1:
                request = api.MetadataRequest((topic,))
            else:
                request = api.OffsetsRequest(topic, 0, api.LATEST_TIME, 1)
            sent.append((conn.send(request), request.API_KEY))
        kinds = [type(conn.receive(key)) for _, key in sent]
    assert kinds == [api.ProduceResponse, api.MetadataResponse, api.OffsetsResponse] * 100


# FETCH


def test_fetch_from_start_middle_and_end(client):
    topic = new_topic()
    batches = [payloads(3, tag="a"), payloads(4, tag="b"), payloads(2, tag="c")]
    results = [client.produce(topic, 0, encode_message_set(b)) for b in batches]
    end = results[-1].log_end_offset

    whole = client.fetch(topic, 0, 0, 1 << 16)
    assert whole.log_end_offset == end
    assert [m.payload for m in iter_messages(whole.message_set, 0)] == sum(batches, [])

    middle = results[1].base_offset
    fetched = client.fetch(topic, 0, middle, 1 << 16)
    got = [m.payload for m in iter_messages(fetched.message_set, middle)]
    assert got == batches[1] + batches[2]
    # An entry boundary inside a batch is as good as a batch's base offset.
    inner = middle + entry_size(batches[1][0])
    fetched = client.fetch(topic, 0, inner, 1 << 16)
    assert [m.payload for m in iter_messages(fetched.message_set, inner)][0] == batches[1][1]

    at_end = client.fetch(topic, 0, end, 1 << 16)
    assert (at_end.error_code, bytes(at_end.message_set), at_end.log_end_offset) == (
        ErrorCode.NONE, b"", end)


def test_fetch_out_of_range_and_invalid_size(client):
    topic = new_topic()
    end = client.produce(topic, 0, encode_message_set(payloads(3))).log_end_offset
    for offset in (-1, end + 1, end + 1000, 2**62):
        r = client.fetch(topic, 0, offset, 1000, raise_on_error=False)
        assert r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, offset
        assert bytes(r.message_set) == b""
    for max_bytes in (0, -1, -(2**31)):
        r = client.fetch(topic, 0, 0, max_bytes, raise_on_error=False)
        assert r.error_code == ErrorCode.INVALID_FETCH_SIZE, max_bytes
        assert bytes(r.message_set) == b""


def test_fetch_unknown_topic_or_partition(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    for t, p in ((new_topic("missing"), 0), (topic, 1), (topic, -1)):
        r = client.fetch(t, p, 0, 1000, raise_on_error=False)
        assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (t, p)
    # A fetch never creates a topic.
    missing = new_topic("missing")
    client.fetch(missing, 0, 0, 1000, raise_on_error=False)
    assert client.metadata([missing]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_cut_inside_an_entry_then_resumed(client):
    topic = new_topic()
    sent = payloads(10, size=100)
    data = encode_message_set(sent)
    client.produce(topic, 0, data)
    size = entry_size(sent[0])  # 110
    max_bytes = 3 * size + 37  # three whole entries and 37 bytes of the fourth

    first = client.fetch(topic, 0, 0, max_bytes)
    assert bytes(first.message_set) == data[:max_bytes]
    got = list(iter_messages(first.message_set, 0))
    assert [m.payload for m in got] == sent[:3]

    offset = got[-1].next_offset
    assert offset == 3 * size
    rest = client.fetch(topic, 0, offset, 1 << 16)
    assert bytes(rest.message_set) == data[offset:]
    assert [m.payload for m in iter_messages(rest.message_set, offset)] == sent[3:]


def test_fetch_smaller_than_one_entry_gives_a_partial_entry(client):
    topic = new_topic()
    data = encode_message_set([b"x" * 500])
    client.produce(topic, 0, data)
    r = client.fetch(topic, 0, 0, 100)
    assert bytes(r.message_set) == data[:100]
    assert list(iter_messages(r.message_set, 0)) == []
    # Doubling max_bytes as a client would gets the entry.
    assert bytes(client.fetch(topic, 0, 0, 1024).message_set) == data


def test_fetch_walks_across_segments(client):
    topic = new_topic("seg")
    client.create_topic(topic, 1, {"segment.bytes": "1024"})
    sent = payloads(120, size=50)
    for i in range(0, 120, 4):
        end = client.produce(topic, 0, encode_message_set(sent[i:i + 4])).log_end_offset
    # Each produced set is 240 bytes: four fit in a segment, the fifth rolls a new one.
    bases = segment_bases(client, topic, 0)
    assert end == 7200
    assert bases == list(range(0, end, 960))

    for max_bytes in (300, 1000, 5000):
        offset, messages = 0, []
        while offset < end:
            fetched = client.fetch(topic, 0, offset, max_bytes)
            assert len(fetched.message_set) <= max_bytes
            got = list(iter_messages(fetched.message_set, offset))
            assert got, f"nothing whole at {offset} with max_bytes {max_bytes}"
            messages += got
            offset = got[-1].next_offset
        assert offset == end
        assert [m.payload for m in messages] == sent

    # A fetch from each segment's base reads that segment's first entry.
    for base in bases:
        first = next(iter_messages(client.fetch(topic, 0, base, 5000).message_set, base))
        assert first.offset == base


def test_fetch_many_partitions(client):
    topic = new_topic()
    client.create_topic(topic, 3)
    sets = {p: encode_message_set(payloads(p + 2, tag=f"{p}-")) for p in range(3)}
    for p, data in sets.items():
        client.produce(topic, p, data)
    other = new_topic()
    client.produce(other, 0, encode_message_set([b"other"]))
    results = client.fetch_many(
        [(topic, 2, 0, 1 << 16), (other, 0, 0, 1 << 16), (topic, 0, 0, 1 << 16),
         (topic, 1, len(sets[1]) + 1, 100), (topic, 1, 0, 1 << 16)],
        raise_on_error=False)
    assert [(r.topic, r.partition) for r in results] == [
        (topic, 2), (other, 0), (topic, 0), (topic, 1), (topic, 1)]
    assert bytes(results[0].message_set) == sets[2]
    assert [m.payload for m in iter_messages(results[1].message_set, 0)] == [b"other"]
    assert bytes(results[2].message_set) == sets[0]
    assert results[3].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (results[4].error_code, bytes(results[4].message_set)) == (0, sets[1])
    assert [r.log_end_offset for r in results if r.topic == topic and r.error_code == 0] == [
        len(sets[2]), len(sets[0]), len(sets[1])]


def test_long_poll_waits_for_max_wait_when_no_data(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    started = time.monotonic()
    r = client.fetch(topic, 0, 0, 1000, max_wait_ms=600, min_bytes=1)
    elapsed = time.monotonic() - started
    assert (r.error_code, bytes(r.message_set)) == (ErrorCode.NONE, b"")
    assert 0.55 <= elapsed < 3.0


def test_long_poll_without_min_bytes_answers_at_once(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    started = time.monotonic()
    client.fetch(topic, 0, 0, 1000, max_wait_ms=5000, min_bytes=0)
    assert time.monotonic() - started < 1.0


def test_long_poll_returns_early_when_data_arrives(uri):
    topic = created_topic(uri, 2)
    data = encode_message_set([b"wake up"])
    answer = {}

    def poll():
        with SimpleClient(uri) as c:
            started = time.monotonic()
            answer["results"] = c.fetch_many(
                [(topic, 0, 0, 1000), (topic, 1, 0, 1000)], max_wait_ms=8000, min_bytes=1)
            answer["elapsed"] = time.monotonic() - started

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.3)
    with SimpleClient(uri) as producer:
        producer.produce(topic, 1, data)
    poller.join(15)
    assert not poller.is_alive()
    assert 0.25 <= answer["elapsed"] < 3.0
    parts = {r.partition: bytes(r.message_set) for r in answer["results"]}
    assert parts == {0: b"", 1: data}


def test_long_poll_waits_until_min_bytes_are_there(uri):
    topic = created_topic(uri)
    small = encode_message_set([b"s"])  # 11 bytes: below min_bytes
    answer = {}

    def poll():
        with SimpleClient(uri) as c:
            started = time.monotonic()
            answer["result"] = c.fetch(topic, 0, 0, 1000, max_wait_ms=8000, min_bytes=20)
            answer["elapsed"] = time.monotonic() - started

    poller = threading.Thread(target=poll)
    poller.start()
    with SimpleClient(uri) as producer:
        time.sleep(0.2)
        producer.produce(topic, 0, small)
        time.sleep(0.4)
        assert poller.is_alive(), "answered with fewer than min_bytes before max_wait"
        producer.produce(topic, 0, small)
    poller.join(15)
    assert not poller.is_alive()
    assert 0.55 <= answer["elapsed"] < 3.0
    assert bytes(answer["result"].message_set) == small + small


# OFFSETS


def test_offsets_latest_and_earliest(client):
    topic = new_topic()
    client.create_topic(topic, 2)
    assert client.offsets(topic, 0, api.LATEST_TIME) == (0,)
    assert client.offsets(topic, 0, api.EARLIEST_TIME) == (0,)
    end = client.produce(topic, 0, encode_message_set(payloads(5))).log_end_offset
    assert client.offsets(topic, 0, api.LATEST_TIME, max_offsets=10) == (end,)
    assert client.offsets(topic, 0, api.EARLIEST_TIME, max_offsets=10) == (0,)
    assert client.offsets(topic, 1, api.LATEST_TIME) == (0,)


def test_offsets_unknown_topic_or_partition(client):
    topic = new_topic()
    client.create_topic(topic, 1)
    for t, p in ((new_topic("missing"), 0), (topic, 1)):
        for time_ in (api.LATEST_TIME, api.EARLIEST_TIME, FAR_FUTURE_MS):
            r = client.request(api.OffsetsRequest(t, p, time_, 1))
            assert (r.error_code, r.offsets) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()), (t, p)


def test_offsets_by_time_follow_segment_mtimes(client):
    topic = new_topic("time")
    client.create_topic(topic, 1, {"segment.bytes": "200"})
    data = encode_message_set([b"y" * 140])  # 150 bytes: every set after the first rolls
    marks, bases = [], []
    for _ in range(3):
        marks.append(int(time.time() * 1000))
        time.sleep(0.06)
        bases.append(client.produce(topic, 0, data).base_offset)
        time.sleep(0.06)
    marks.append(int(time.time() * 1000))
    end = log_end(client, topic, 0)
    assert bases == [0, 150, 300] and end == 450
    assert segment_bases(client, topic, 0) == bases

    def at(t, n=100):
        return list(client.offsets(topic, 0, t, max_offsets=n))

    assert at(marks[0]) == []
    assert at(marks[1]) == [0]
    assert at(marks[2]) == [150, 0]
    assert at(marks[3]) == [300, 150, 0]
    assert at(FAR_FUTURE_MS) == [end, 300, 150, 0]
    assert at(FAR_FUTURE_MS, 2) == [end, 300]
    assert at(marks[3], 1) == [300]
    assert at(1) == []


def test_log_start_moves_with_retention(client):
    topic = new_topic("ret")
    client.create_topic(topic, 1, {"segment.bytes": "100", "retention.bytes": "150"})
    data = encode_message_set([b"z" * 80])  # 90 bytes: one set per segment
    for _ in range(5):
        client.produce(topic, 0, data)
    end = log_end(client, topic, 0)
    assert end == 450

    def start():
        return client.offsets(topic, 0, api.EARLIEST_TIME)[0]

    # Whole segments go, oldest first, while the partition is over 150 bytes:
    # 90 bytes (the active segment) stay.
    assert wait_for(lambda: start() == 360, timeout=5), f"log start is {start()}"
    log_start = start()
    (part,) = client.metadata([topic]).topics[0].partitions
    assert (part.log_start_offset, part.log_end_offset) == (log_start, end)
    r = client.fetch(topic, 0, log_start - 90, 1000, raise_on_error=False)
    assert r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    r = client.fetch(topic, 0, log_start, 1000)
    assert bytes(r.message_set) == data * ((end - log_start) // 90)
