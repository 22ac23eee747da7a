"""BrokerConnection against a scripted broker on a real socket."""

import socket
import time

import pytest

from hostbroker.client import BrokerConnection, BrokerError, ConnectionClosedError, connect
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import (
    ApiKey,
    FetchPartition,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProducePartition,
    ProduceRequest,
    ProducePartitionResult,
    ProduceResponse,
    encode_error_frame,
    encode_response,
)

from tests.client.fake_broker import CLOSE


def metadata_echo(header, request):
    """Answers METADATA with broker_id = the correlation id, so order is visible."""
    return encode_response(header.correlation_id, MetadataResponse(header.correlation_id, (), ()))


def test_no_io_before_connect(short_dir):
    connection = BrokerConnection(f"unix://{short_dir}/nobody-listens.sock")
    assert not connection.connected
    with pytest.raises(ConnectionClosedError):
        connection.send(MetadataRequest())
    with pytest.raises(FileNotFoundError):
        connection.connect()


def test_bad_uri_fails_in_the_constructor():
    with pytest.raises(ValueError):
        BrokerConnection("tcp://nowhere")


def test_pipelined_requests_are_answered_in_order(fake_broker):
    broker = fake_broker(metadata_echo)
    with connect(broker.uri, client_id="pipeliner") as connection:
        ids = [connection.send(MetadataRequest((f"t{n}",))) for n in range(50)]
        assert connection.pending == 50
        answers = [connection.receive(ApiKey.METADATA) for _ in ids]
        assert [a.broker_id for a in answers] == ids == list(range(50))
        assert connection.pending == 0
    assert [r.topics for _, r in broker.requests] == [(f"t{n}",) for n in range(50)]
    assert {h.client_id for h, _ in broker.requests} == {"pipeliner"}


def test_request_refuses_to_jump_the_pipeline(fake_broker):
    broker = fake_broker(metadata_echo)
    with connect(broker.uri) as connection:
        connection.send(MetadataRequest())
        with pytest.raises(RuntimeError):
            connection.request(MetadataRequest())
        with pytest.raises(ValueError):
            connection.receive(ApiKey.FETCH)
        assert connection.receive().broker_id == 0


def test_produce_with_acks_zero_holds_no_place(fake_broker):
    def answer(header, request):
        if isinstance(request, ProduceRequest):
            return b""
        return metadata_echo(header, request)

    broker = fake_broker(answer)
    with connect(broker.uri) as connection:
        produce = ProduceRequest(0, 100, (ProducePartition("t", 0, b"data"),))
        assert connection.request(produce) is None
        connection.send(produce)
        assert connection.pending == 0
        assert connection.request(MetadataRequest()).broker_id == 2


def test_error_frame_raises_broker_error_and_closes(fake_broker):
    broker = fake_broker(
        lambda header, request: encode_error_frame(header.correlation_id,
                                                   ErrorCode.UNSUPPORTED_VERSION))
    connection = connect(broker.uri)
    connection.send(MetadataRequest())
    connection.send(MetadataRequest())
    with pytest.raises(BrokerError) as info:
        connection.receive()
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert info.value.topic is None
    assert not connection.connected and connection.pending == 0
    with pytest.raises(ConnectionClosedError):
        connection.send(MetadataRequest())
    # A fresh connect() starts over.
    connection.connect()
    with pytest.raises(BrokerError):
        connection.request(MetadataRequest())


def test_unknown_error_code_in_an_error_frame(fake_broker):
    broker = fake_broker(lambda header, request: encode_error_frame(header.correlation_id, 321))
    with connect(broker.uri) as connection, pytest.raises(BrokerError) as info:
        connection.request(MetadataRequest())
    assert info.value.code == 321


def test_broker_closing_the_connection(fake_broker):
    broker = fake_broker(lambda header, request: CLOSE)
    connection = connect(broker.uri)
    with pytest.raises(ConnectionClosedError):
        connection.request(MetadataRequest())
    assert not connection.connected
    assert isinstance(ConnectionClosedError(), ConnectionError)


def test_broker_closing_in_the_middle_of_a_frame(fake_broker):
    whole = encode_response(0, MetadataResponse(1, (), ()))
    broker = fake_broker(lambda header, request: whole[:-3])
    connection = connect(broker.uri)
    connection.send(MetadataRequest())
    # Close the broker's side after the partial frame went out.
    time.sleep(0.1)
    broker.close()
    with pytest.raises(ConnectionClosedError):
        connection.receive()


def test_wrong_correlation_id_is_a_protocol_error(fake_broker):
    broker = fake_broker(
        lambda header, request: encode_response(header.correlation_id + 1,
                                                MetadataResponse(0, (), ())))
    connection = connect(broker.uri)
    with pytest.raises(ProtocolError, match="correlation id"):
        connection.request(MetadataRequest())
    assert not connection.connected


def test_undecodable_answer_is_a_protocol_error(fake_broker):
    broker = fake_broker(lambda header, request: b"\x00\x00\x00\x09" + b"\x00" * 9)
    connection = connect(broker.uri)
    with pytest.raises(ProtocolError):
        connection.request(MetadataRequest())
    assert not connection.connected


def test_oversized_answer_is_refused_before_allocating(fake_broker):
    broker = fake_broker(lambda header, request: b"\x7f\xff\xff\xff")
    connection = BrokerConnection(broker.uri, max_response_bytes=1 << 20).connect()
    with pytest.raises(ProtocolError, match="limit"):
        connection.request(MetadataRequest())


def big_fetch_answer(header, request):
    part = request.partitions[0]
    data = bytes([part.partition % 256]) * part.max_bytes
    return encode_response(
        header.correlation_id,
        FetchResponse((FetchPartitionResult(part.topic, part.partition, 0, len(data), data),)),
    )


def test_large_answers_stay_valid_after_later_reads(fake_broker):
    broker = fake_broker(big_fetch_answer)
    with connect(broker.uri) as connection:
        for partition in (1, 2, 3):
            connection.send(FetchRequest(0, 0, (FetchPartition("t", partition, 0, 3_000_000),)))
        first, second, third = (connection.receive() for _ in range(3))
    sets = [r.partitions[0].message_set for r in (first, second, third)]
    assert all(isinstance(s, memoryview) for s in sets)
    assert [bytes(s) == bytes([n]) * 3_000_000 for n, s in zip((1, 2, 3), sets)] == [True] * 3


def test_many_small_answers_arriving_together(fake_broker):
    held = []

    def answer(header, request):
        # Hold the answers until all requests are in, then send them in one go.
        held.append(metadata_echo(header, request))
        return b"".join(held) if len(held) == 200 else b""

    broker = fake_broker(answer)
    with connect(broker.uri) as connection:
        for _ in range(200):
            connection.send(MetadataRequest())
        assert [connection.receive().broker_id for _ in range(200)] == list(range(200))


def test_timeout_closes_the_connection(fake_broker):
    broker = fake_broker(lambda header, request: b"")
    connection = BrokerConnection(broker.uri, timeout=0.1).connect()
    with pytest.raises(TimeoutError):
        connection.request(MetadataRequest())
    assert not connection.connected


def test_long_poll_and_acks_all_extend_the_wait(fake_broker):
    def slow(header, request):
        time.sleep(0.3)
        if isinstance(request, ProduceRequest):
            return encode_response(header.correlation_id, ProduceResponse(
                (ProducePartitionResult("t", 0, 0, 0, 4),)))
        return big_fetch_answer(header, request)

    broker = fake_broker(slow)
    with BrokerConnection(broker.uri, timeout=0.1) as connection:
        fetch = FetchRequest(500, 1, (FetchPartition("t", 0, 0, 10),))
        assert connection.request(fetch).partitions[0].log_end_offset == 10
        produce = ProduceRequest(-1, 500, (ProducePartition("t", 0, b"data"),))
        assert connection.request(produce).partitions[0].log_end_offset == 4


def test_tcp_sets_no_delay(fake_broker):
    broker = fake_broker(metadata_echo, tcp=True)
    with connect(broker.uri) as connection:
        assert connection.request(MetadataRequest()).broker_id == 0
        sock = connection._sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
