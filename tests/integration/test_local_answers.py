"""METADATA and OFFSETS answered by the processor itself
(``processor.local.requests``): the same answers the handler gives, never
one that misses what the same connection did just before, and the same
error frames for bad requests.

The tests of the default settings share one broker (``served``), each on
topics of its own, its counters read relative to its start; those of
``processor.local.requests`` false or of a small ``response.max.bytes`` (one
test each, and the latter lists every topic) keep their own."""

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from tests.integration.wire_helpers import FAR_FUTURE_MS, RawSocket, module_broker, new_topic

served = module_broker()  # the default settings: processor.local.requests true


def _answers(broker, topic: str, sets: list[bytes]):
    """Produce ``sets`` to partition 0 of ``topic``, then 40 METADATA and 40
    OFFSETS round trips; their last answers and the requests each kind counted
    for the round trips alone."""
    with broker.client(broker.tcp) as c:
        c.create_topic(topic, 2)
        for s in sets:
            c.produce(topic, 0, s)
        kinds = ("handler", "processor")
        before = {k: broker.counter(k, "requests") for k in kinds}
        for _ in range(40):
            metadata = c.metadata([topic])
            offsets = c.offsets(topic, 0, FAR_FUTURE_MS, 10)
    return metadata, offsets, {k: broker.counter(k, "requests") - before[k] for k in kinds}


@pytest.mark.parametrize("local", [True, False])
def test_answers_are_the_same_whoever_builds_them(request, make_broker, local):
    # on (the default): the shared broker; off: one of its own
    broker = (request.getfixturevalue("served") if local
              else make_broker(**{"processor.local.requests": "false"}))
    sets = [encode_message_set([b"x" * 100] * 10), encode_message_set([b"y" * 50] * 3)]
    name = new_topic("same")
    metadata, offsets, counted = _answers(broker, name, sets)
    end = sum(len(s) for s in sets)
    (topic,) = metadata.topics
    assert (topic.topic, topic.error_code) == (name, ErrorCode.NONE)
    assert [(p.partition, p.error_code, p.log_start_offset, p.log_end_offset)
            for p in topic.partitions] == [(0, 0, 0, end), (1, 0, 0, 0)]
    assert all(p.log_dir == broker.settings["log.dirs"] for p in topic.partitions)
    (b,) = metadata.brokers
    assert (b.port, b.unix_path) == (broker.port, broker.unix_path)
    assert offsets == (end, 0)
    # who answered: every round trip counts at the processor that read it; at a
    # handler only when it went there
    assert counted["processor"] == 80
    assert counted["handler"] == (0 if local else 80)


def test_metadata_behind_a_produce_on_the_same_connection_sees_its_topic(served):
    """A PRODUCE that creates its topic, with METADATA and OFFSETS for that topic
    in the same write: they wait their turn at the handler, after the topic
    was made, so they never answer that it is unknown. (Its log end they may
    see before or after the append: the handler answers them while the writer
    appends, as it always has.)"""
    broker = served
    with RawSocket(broker.tcp) as raw:
        for i in range(20):
            topic = new_topic("fresh")
            data = encode_message_set([b"z" * 20] * (i + 1))
            raw.send(api.encode_request(api.ProduceRequest(
                1, 10000, (api.ProducePartition(topic, 0, data),)), 3 * i)
                + api.encode_request(api.MetadataRequest((topic,)), 3 * i + 1)
                + api.encode_request(api.OffsetsRequest(topic, 0, -1, 1), 3 * i + 2))
            corr, produced = raw.read_response(api.ApiKey.PRODUCE)
            assert corr == 3 * i and produced.partitions[0].error_code == ErrorCode.NONE
            corr, metadata = raw.read_response(api.ApiKey.METADATA)
            assert corr == 3 * i + 1
            (t,) = metadata.topics
            assert t.error_code == ErrorCode.NONE, topic
            assert [p.partition for p in t.partitions] == [0]
            assert t.partitions[0].log_end_offset in (0, len(data))
            corr, offsets = raw.read_response(api.ApiKey.OFFSETS)
            assert (corr, offsets.error_code) == (3 * i + 2, ErrorCode.NONE)
            assert offsets.offsets in ((0,), (len(data),))


def test_pipelined_metadata_answers_keep_their_order(served):
    """Answers built in the processor and by the handler leave in request order."""
    broker = served
    topic = new_topic("order")
    with broker.client(broker.unix) as c:
        c.create_topic(topic, 1)
    requests = []
    for i in range(60):
        if i % 3 == 0:
            requests.append((api.ApiKey.PRODUCE, api.ProduceRequest(
                1, 10000, (api.ProducePartition(topic, 0, encode_message_set([b"o"])),))))
        else:
            requests.append((api.ApiKey.METADATA, api.MetadataRequest((topic,))))
    with RawSocket(broker.unix) as raw:
        raw.send(b"".join(api.encode_request(r, i) for i, (_, r) in enumerate(requests)))
        for i, (key, _) in enumerate(requests):
            corr, answer = raw.read_response(key)
            assert corr == i
            if key == api.ApiKey.METADATA:
                assert answer.topics[0].partitions[0].log_end_offset >= 0


@pytest.mark.parametrize("frame, code", [
    (api.encode_request(api.MetadataRequest(("a",)), 7)[:4] + b"\x00\x03\x00\x09"
     + api.encode_request(api.MetadataRequest(("a",)), 7)[8:], ErrorCode.UNSUPPORTED_VERSION),
])
def test_a_bad_request_answered_here_gets_its_error_frame_and_the_close(served, frame, code):
    broker = served
    with RawSocket(broker.tcp) as raw:
        raw.send(frame + api.encode_request(api.MetadataRequest(()), 8))
        corr, error = api.decode_error_frame(raw.read_frame())
        assert (corr, error) == (7, code)
        raw.assert_closed()  # the METADATA behind it is not answered
    with broker.client() as c:
        assert c.metadata().brokers  # the broker goes on


@pytest.mark.parametrize("local", [True, False])
def test_metadata_of_many_topics_and_its_limit_are_the_same_whoever_answers(make_broker,
                                                                            local):
    """All-topics METADATA (the table read in bulk, topics packed once and
    kept) from the processor or, with ``processor.local.requests`` off, from
    the handler: the same topics and offsets, and past ``response.max.bytes``
    the same error frame, then the connection closed."""
    broker = make_broker(**{"processor.local.requests": str(local).lower(),
                            "response.max.bytes": "100000"})
    with broker.client(broker.unix) as c:
        for i in range(20):
            c.create_topic(f"many-{i:02}", 4)
        c.produce("many-07", 2, encode_message_set([b"m" * 10] * 3))
        every = c.metadata()
        assert [t.topic for t in every.topics] == [f"many-{i:02}" for i in range(20)]
        ends = {(t.topic, p.partition): p.log_end_offset
                for t in every.topics for p in t.partitions}
        assert len(ends) == 80 and {k for k, v in ends.items() if v} == {("many-07", 2)}
        c.produce("many-07", 2, encode_message_set([b"n" * 10]))  # seen at once, not cached
        (again,) = [t for t in c.metadata().topics if t.topic == "many-07"]
        assert again.partitions[2].log_end_offset > ends["many-07", 2]
        assert len(c.metadata(["many-03"] * 100).topics) == 100  # ~30 KB: answered
    with RawSocket(broker.unix) as raw:  # ~300 KB: refused, and the connection closed
        raw.send(api.encode_request(api.MetadataRequest(("many-03",) * 1000), 9))
        raw.assert_error_frame(9, ErrorCode.INVALID_REQUEST)
