"""SimpleClient against a tiny in-memory broker speaking the real protocol."""

import pytest

from hostbroker.client import BrokerError, SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.protocol import (
    EARLIEST_TIME,
    AdminResponse,
    CreateTopicRequest,
    DeleteTopicRequest,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    OffsetCommitPartitionResult,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartitionResult,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetsRequest,
    OffsetsResponse,
    ProducePartitionResult,
    ProduceRequest,
    ProduceResponse,
    encode_error_frame,
    encode_response,
)

UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class MiniBroker:
    """Partitions as bytearrays (offset = byte position, as in docs/spec/log-format.md)."""

    def __init__(self):
        self.logs = {("t", 0): bytearray(), ("t", 1): bytearray()}
        self.configs = {}
        self.committed = {}

    def answer(self, header, request):
        if request == MetadataRequest(("refuse",)):
            return encode_error_frame(header.correlation_id, ErrorCode.UNSUPPORTED_VERSION)
        handle = getattr(self, type(request).__name__)
        response = handle(request)
        return b"" if response is None else encode_response(header.correlation_id, response)

    def ProduceRequest(self, request):
        results = []
        for part in request.partitions:
            log = self.logs.get((part.topic, part.partition))
            if log is None:
                results.append(ProducePartitionResult(part.topic, part.partition, UNKNOWN, -1, -1))
                continue
            base = len(log)
            log += part.message_set
            results.append(ProducePartitionResult(part.topic, part.partition, 0, base, len(log)))
        return None if request.acks == 0 else ProduceResponse(tuple(results))

    def FetchRequest(self, request):
        results = []
        for part in request.partitions:
            log = self.logs.get((part.topic, part.partition))
            if log is None:
                results.append(FetchPartitionResult(part.topic, part.partition, UNKNOWN, -1, b""))
            else:
                data = bytes(log[part.offset : part.offset + part.max_bytes])
                results.append(FetchPartitionResult(part.topic, part.partition, 0, len(log), data))
        return FetchResponse(tuple(results))

    def OffsetsRequest(self, request):
        log = self.logs.get((request.topic, request.partition))
        if log is None:
            return OffsetsResponse(UNKNOWN, ())
        return OffsetsResponse(0, (0,) if request.time == EARLIEST_TIME else (len(log),))

    def MetadataRequest(self, request):
        topics = sorted({topic for topic, _ in self.logs})
        return MetadataResponse(1, (), tuple(
            MetadataTopic(topic, 0, tuple(
                MetadataPartition(p, 0, 1, 0, len(self.logs[t, p]), "/d")
                for t, p in sorted(self.logs) if t == topic))
            for topic in topics if not request.topics or topic in request.topics))

    def CreateTopicRequest(self, request):
        if any(topic == request.topic for topic, _ in self.logs):
            return AdminResponse(ErrorCode.TOPIC_ALREADY_EXISTS, f"{request.topic} exists")
        for partition in range(request.partitions):
            self.logs[request.topic, partition] = bytearray()
        self.configs[request.topic] = {entry.key: entry.value for entry in request.configs}
        return AdminResponse(0)

    def DeleteTopicRequest(self, request):
        doomed = [key for key in self.logs if key[0] == request.topic]
        for key in doomed:
            del self.logs[key]
        return AdminResponse(0 if doomed else UNKNOWN, None if doomed else "no such topic")

    def OffsetCommitRequest(self, request):
        results = []
        for part in request.partitions:
            code = 0 if (part.topic, part.partition) in self.logs else UNKNOWN
            if not code:
                self.committed[request.group, part.topic, part.partition] = (part.offset, part.metadata)
            results.append(OffsetCommitPartitionResult(part.topic, part.partition, code))
        return OffsetCommitResponse(tuple(results))

    def OffsetFetchRequest(self, request):
        return OffsetFetchResponse(tuple(
            OffsetFetchPartitionResult(
                part.topic, part.partition,
                *self.committed.get((request.group, part.topic, part.partition), (-1, None)),
                0 if (part.topic, part.partition) in self.logs else UNKNOWN)
            for part in request.partitions))


@pytest.fixture
def mini(fake_broker):
    state = MiniBroker()
    broker = fake_broker(state.answer)
    with SimpleClient(broker.uri, client_id="simple-test", timeout=5) as client:
        yield state, broker, client


def test_produce_then_fetch(mini):
    state, broker, client = mini
    first = client.produce("t", 0, b"hello")
    assert first == ProducePartitionResult("t", 0, ErrorCode.NONE, 0, 5)
    assert client.produce("t", 0, b" world", acks=-1).base_offset == 5
    fetched = client.fetch("t", 0, 0, 1024)
    assert bytes(fetched.message_set) == b"hello world" and fetched.log_end_offset == 11
    assert bytes(client.fetch("t", 0, 6, 3).message_set) == b"wor"
    assert broker.requests[0][0].client_id == "simple-test"


def test_produce_with_acks_zero_returns_none(mini):
    state, broker, client = mini
    assert client.produce("t", 1, b"abc", acks=0) is None
    assert client.offsets("t", 1) == (3,)
    assert client.offsets("t", 1, EARLIEST_TIME) == (0,)


def test_partition_errors_raise_unless_asked_not_to(mini):
    state, broker, client = mini
    with pytest.raises(BrokerError) as info:
        client.produce("nope", 0, b"x")
    assert (info.value.code, info.value.topic, info.value.partition) == (UNKNOWN, "nope", 0)
    result = client.produce("nope", 0, b"x", raise_on_error=False)
    assert result.error_code == UNKNOWN and result.base_offset == -1
    with pytest.raises(BrokerError):
        client.fetch("nope", 3, 0, 10)
    assert client.fetch("nope", 3, 0, 10, raise_on_error=False).error_code == UNKNOWN
    with pytest.raises(BrokerError):
        client.offsets("nope", 0)


def test_produce_many_and_fetch_many(mini):
    state, broker, client = mini
    results = client.produce_many([("t", 0, b"aa"), ("t", 1, b"bbb")])
    assert [(r.partition, r.log_end_offset) for r in results] == [(0, 2), (1, 3)]
    assert len(broker.requests[-1][1].partitions) == 2
    fetched = client.fetch_many([("t", 0, 0, 10), ("t", 1, 1, 10)], max_wait_ms=10, min_bytes=1)
    assert [bytes(f.message_set) for f in fetched] == [b"aa", b"bb"]
    request = broker.requests[-1][1]
    assert isinstance(request, FetchRequest)
    assert (request.max_wait_ms, request.min_bytes) == (10, 1)
    with pytest.raises(BrokerError):
        client.produce_many([("t", 0, b"ok"), ("missing", 0, b"no")])


def test_admin_and_metadata(mini):
    state, broker, client = mini
    assert client.create_topic("events", 2, {"retention.ms": "60000"}).error_code == 0
    assert state.configs["events"] == {"retention.ms": "60000"}
    client.create_topic("more", 1, [("segment.bytes", "1048576")])
    assert isinstance(broker.requests[-1][1], CreateTopicRequest)
    assert state.configs["more"] == {"segment.bytes": "1048576"}
    with pytest.raises(BrokerError, match="events exists") as info:
        client.create_topic("events", 2)
    assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert client.create_topic("events", 2, raise_on_error=False).error_message == "events exists"
    metadata = client.metadata(["events"])
    assert [t.topic for t in metadata.topics] == ["events"]
    assert [p.partition for p in metadata.topics[0].partitions] == [0, 1]
    assert {t.topic for t in client.metadata().topics} == {"events", "more", "t"}
    client.delete_topic("events")
    assert isinstance(broker.requests[-1][1], DeleteTopicRequest)
    with pytest.raises(BrokerError, match="no such topic"):
        client.delete_topic("events")


def test_offset_commit_and_fetch(mini):
    state, broker, client = mini
    results = client.offset_commit("g", [("t", 0, 42, "meta"), ("t", 1, 7, None)])
    assert [r.error_code for r in results] == [0, 0]
    assert isinstance(broker.requests[-1][1], OffsetCommitRequest)
    fetched = client.offset_fetch("g", [("t", 0), ("t", 1)])
    assert [(f.offset, f.metadata) for f in fetched] == [(42, "meta"), (7, None)]
    assert isinstance(broker.requests[-1][1], OffsetFetchRequest)
    assert client.offset_fetch("other", [("t", 0)])[0].offset == -1
    with pytest.raises(BrokerError):
        client.offset_commit("g", [("missing", 0, 1, None)])


def test_reconnects_after_an_error_frame_closed_the_connection(mini):
    state, broker, client = mini
    with pytest.raises(BrokerError) as info:
        client.metadata(["refuse"])
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert not client.connection.connected
    assert client.offsets("t", 0) == (0,)
    assert isinstance(broker.requests[-1][1], OffsetsRequest)


def test_no_connection_until_the_first_request(short_dir):
    client = SimpleClient(f"unix://{short_dir}/none.sock")
    assert not client.connection.connected
    with pytest.raises(FileNotFoundError):
        client.metadata()
    client.close()


def test_partitions_cut_by_the_answer_limit_come_back_empty_without_a_fetch_of_their_own(
        fake_broker):
    # The broker's fetch.max.bytes ran out after the first partition: the second
    # gets nothing, the third part of an entry that fits its max_bytes. Both have
    # more log; neither is an entry too large for max_bytes.
    from hostbroker.client import SimpleConsumer
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol.api import FetchPartitionResult, FetchResponse, encode_response

    whole = encode_message_set([b"first"])

    def answer(header, request):
        sets = [whole, b"", whole[:7]]
        return encode_response(header.correlation_id, FetchResponse(tuple(
            FetchPartitionResult(p.topic, p.partition, 0, 1000, data)
            for p, data in zip(request.partitions, sets))))

    broker = fake_broker(answer)
    with SimpleConsumer(broker.uri, fetch_wait_max_ms=0) as consumer:
        first, second, third = consumer.multifetch([("t", 0, 0), ("t", 1, 0), ("t", 2, 0)])
    assert [v for _, _, v in first] == [b"first"]
    assert (second.entries, second.next_offset, third.entries, third.next_offset) == (0, 0, 0, 0)
    assert len(broker.requests) == 1


def test_a_lone_partition_without_a_whole_entry_is_not_taken_for_a_cut_answer(fake_broker):
    # Nothing came before it, so the broker's answer limit did not cut it: the
    # consumer asks again for more, alone, as for an entry larger than max_bytes.
    from hostbroker.client import SimpleConsumer
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol.api import FetchPartitionResult, FetchResponse, encode_response

    whole = encode_message_set([b"x" * 100])

    def answer(header, request):
        (p,) = request.partitions
        return encode_response(header.correlation_id, FetchResponse((
            FetchPartitionResult(p.topic, p.partition, 0, len(whole), whole[:p.max_bytes]),)))

    broker = fake_broker(answer)
    with SimpleConsumer(broker.uri, fetch_wait_max_ms=0) as consumer:
        fetched = consumer.fetch("t", 0, 0, max_bytes=50)
    assert [v for _, _, v in fetched] == [b"x" * 100]
    assert [r.partitions[0].max_bytes for _, r in broker.requests] == [50, 110]
