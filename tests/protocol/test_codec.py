"""Frames of every API: exact bytes, round trips, and each way a decoder can be fed."""

import dataclasses

import pytest
from hypothesis import given

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import (
    AdminResponse,
    ApiKey,
    MetadataBroker,
    CreateTopicRequest,
    DeleteTopicRequest,
    FetchPartition,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
    FrameReader,
    HeaderTooShortError,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitPartition,
    OffsetCommitPartitionResult,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartition,
    OffsetFetchPartitionResult,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetsRequest,
    OffsetsResponse,
    MetadataPartition,
    ProducePartition,
    ProducePartitionResult,
    ProduceRequest,
    ProduceResponse,
    TopicConfigEntry,
    MetadataTopic,
    decode_error_frame,
    decode_request,
    decode_request_header,
    decode_response,
    encode_error_frame,
    encode_request,
    encode_response,
    is_error_frame,
    peek_correlation_id,
    peek_produce_acks,
)

from tests.protocol.strategies import NO_DEADLINE, requests, responses_by_api
from tests.protocol.wire import array, data, i16, i32, i64, request_frame, sized, string

# (request, expected body bytes written from docs/spec/protocol.md)
REQUEST_BODIES = [
    (
        ProduceRequest(-1, 1500, (ProducePartition("t", 3, b"abc"), ProducePartition("u", 0, b""))),
        i16(-1) + i32(1500) + array(string("t") + i32(3) + data(b"abc"),
                                    string("u") + i32(0) + data(b"")),
    ),
    (
        FetchRequest(100, 1, (FetchPartition("t", 2, 4096, 65536),)),
        i32(100) + i32(1) + array(string("t") + i32(2) + i64(4096) + i32(65536)),
    ),
    (OffsetsRequest("t", 1, -2, 10), string("t") + i32(1) + i64(-2) + i32(10)),
    (MetadataRequest(), array()),
    (MetadataRequest(("a", "b")), array(string("a"), string("b"))),
    (
        CreateTopicRequest("t", 8, (TopicConfigEntry("retention.ms", "1000"),)),
        string("t") + i32(8) + array(string("retention.ms") + string("1000")),
    ),
    (DeleteTopicRequest("t"), string("t")),
    (
        OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 77, "m"),
                                  OffsetCommitPartition("t", 1, 5, None))),
        string("g") + array(string("t") + i32(0) + i64(77) + string("m"),
                            string("t") + i32(1) + i64(5) + string(None)),
    ),
    (
        OffsetFetchRequest("g", (OffsetFetchPartition("t", 4),)),
        string("g") + array(string("t") + i32(4)),
    ),
]

# (api_key, response, expected body bytes)
RESPONSE_BODIES = [
    (
        ApiKey.PRODUCE,
        ProduceResponse((ProducePartitionResult("t", 3, ErrorCode.NONE, 100, 150),
                         ProducePartitionResult("u", 0, ErrorCode.STORAGE_ERROR, -1, -1))),
        array(string("t") + i32(3) + i16(0) + i64(100) + i64(150),
              string("u") + i32(0) + i16(12) + i64(-1) + i64(-1)),
    ),
    (
        ApiKey.FETCH,
        FetchResponse((FetchPartitionResult("t", 2, ErrorCode.NONE, 9000, b"entries"),)),
        array(string("t") + i32(2) + i16(0) + i64(9000) + data(b"entries")),
    ),
    (ApiKey.OFFSETS, OffsetsResponse(ErrorCode.NONE, (300, 0)), i16(0) + array(i64(300), i64(0))),
    (
        ApiKey.METADATA,
        MetadataResponse(
            1,
            (MetadataBroker(1, "127.0.0.1", 9092, "/run/hb.sock"), MetadataBroker(2, None, -1, None)),
            (MetadataTopic("t", ErrorCode.NONE,
                           (MetadataPartition(0, ErrorCode.NONE, 1, 0, 4096, "/data/d1"),)),
             MetadataTopic("x", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())),
        ),
        i32(1)
        + array(i32(1) + string("127.0.0.1") + i32(9092) + string("/run/hb.sock"),
                i32(2) + string(None) + i32(-1) + string(None))
        + array(string("t") + i16(0) + array(i32(0) + i16(0) + i32(1) + i64(0) + i64(4096)
                                             + string("/data/d1")),
                string("x") + i16(3) + array()),
    ),
    (ApiKey.CREATE_TOPIC, AdminResponse(ErrorCode.TOPIC_ALREADY_EXISTS, "exists"),
     i16(9) + string("exists")),
    (ApiKey.DELETE_TOPIC, AdminResponse(ErrorCode.NONE), i16(0) + string(None)),
    (
        ApiKey.OFFSET_COMMIT,
        OffsetCommitResponse((OffsetCommitPartitionResult("t", 0, ErrorCode.NONE),)),
        array(string("t") + i32(0) + i16(0)),
    ),
    (
        ApiKey.OFFSET_FETCH,
        OffsetFetchResponse((OffsetFetchPartitionResult("t", 0, -1, None, ErrorCode.NONE),)),
        array(string("t") + i32(0) + i64(-1) + string(None) + i16(0)),
    ),
]


def request_ids(cases):
    return [type(case[0]).__name__ for case in cases]


@pytest.mark.parametrize("request_, body", REQUEST_BODIES, ids=request_ids(REQUEST_BODIES))
def test_request_bytes_match_the_spec(request_, body):
    frame = request_frame(request_.API_KEY, 42, "client", body)
    assert encode_request(request_, 42, "client") == sized(frame)
    header, decoded = decode_request(frame)
    assert decoded == request_
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        request_.API_KEY, 0, 42, "client")


@pytest.mark.parametrize("api_key, response, body", RESPONSE_BODIES,
                         ids=[f"{case[0].name}" for case in RESPONSE_BODIES])
def test_response_bytes_match_the_spec(api_key, response, body):
    frame = i32(-7) + body
    assert encode_response(-7, response) == sized(frame)
    assert decode_response(api_key, frame) == (-7, response)


@NO_DEADLINE
@given(requests)
def test_every_request_round_trips(request_):
    frame = encode_request(request_, 1234, "c")
    header, decoded = decode_request(frame[4:])
    assert decoded == request_
    assert header.correlation_id == 1234


@NO_DEADLINE
@given(responses_by_api)
def test_every_response_round_trips(api_and_response):
    api_key, response = api_and_response
    assert decode_response(api_key, encode_response(99, response)[4:]) == (99, response)


def frames_of(stream: bytes, chunk: int) -> list[bytes]:
    reader = FrameReader()
    frames = []
    for start in range(0, len(stream), chunk):
        reader.feed(stream[start : start + chunk])
        while (frame := reader.next_frame()) is not None:
            frames.append(frame)
    assert reader.buffered == 0
    return frames


@pytest.mark.parametrize("request_, _body", REQUEST_BODIES, ids=request_ids(REQUEST_BODIES))
def test_request_decoder_whole_byte_by_byte_and_with_trailing_bytes(request_, _body):
    encoded = encode_request(request_, 5)
    assert decode_request(frames_of(encoded, len(encoded))[0])[1] == request_
    assert [decode_request(f)[1] for f in frames_of(encoded * 2, 1)] == [request_, request_]
    with pytest.raises(ProtocolError, match="left over") as info:
        decode_request(encoded[4:] + b"\x00")
    assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("api_key, response, _body", RESPONSE_BODIES,
                         ids=[f"{case[0].name}" for case in RESPONSE_BODIES])
def test_response_decoder_whole_byte_by_byte_and_with_trailing_bytes(api_key, response, _body):
    encoded = encode_response(5, response)
    assert decode_response(api_key, frames_of(encoded, len(encoded))[0])[1] == response
    assert [decode_response(api_key, f)[1] for f in frames_of(encoded * 2, 1)] == [response] * 2
    with pytest.raises(ProtocolError, match="left over"):
        decode_response(api_key, encoded[4:] + b"\x00")


@pytest.mark.parametrize("request_, _body", REQUEST_BODIES, ids=request_ids(REQUEST_BODIES))
def test_every_truncation_of_a_request_is_a_protocol_error(request_, _body):
    frame = encode_request(request_, 5)[4:]
    for end in range(len(frame)):
        with pytest.raises(ProtocolError) as info:
            decode_request(frame[:end])
        assert info.value.code == ErrorCode.INVALID_REQUEST


def test_message_sets_are_zero_copy_views_of_the_frame():
    frame = bytearray(encode_request(ProduceRequest(1, 0, (ProducePartition("t", 0, b"abc"),)), 1)[4:])
    _, request_ = decode_request(frame)
    message_set = request_.partitions[0].message_set
    assert isinstance(message_set, memoryview) and message_set.obj is frame


@pytest.mark.parametrize("length", [0, 1, 4, 7])
def test_header_too_short_for_a_correlation_id(length):
    frame = bytes(range(length))
    with pytest.raises(HeaderTooShortError):
        decode_request_header(frame)
    with pytest.raises(HeaderTooShortError):
        decode_request(frame)
    assert peek_correlation_id(frame) is None


def test_truncated_client_id_is_invalid_request_not_header_too_short():
    frame = i16(3) + i16(0) + i32(9) + i16(5) + b"ab"
    with pytest.raises(ProtocolError) as info:
        decode_request(frame)
    assert type(info.value) is ProtocolError
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert peek_correlation_id(frame) == 9


def test_null_client_id_is_allowed():
    header, _ = decode_request(request_frame(3, 1, None, array()))
    assert header.client_id is None


@pytest.mark.parametrize("api_key", [8, 9, 10, 11, 12, -1, 32767])
def test_unknown_and_reserved_api_keys_are_unsupported(api_key):
    with pytest.raises(ProtocolError) as info:
        decode_request(request_frame(api_key, 1, "c", b""))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("api_version", [1, -1, 2])
def test_api_versions_other_than_zero_are_unsupported(api_version):
    with pytest.raises(ProtocolError) as info:
        decode_request(request_frame(3, 1, "c", array(), api_version=api_version))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize(
    "api_key, body",
    [
        (ApiKey.PRODUCE, i16(1) + i32(0) + i32(2**30)),
        (ApiKey.FETCH, i32(0) + i32(0) + i32(3) + string("t") + i32(0) + i64(0) + i32(1)),
        (ApiKey.METADATA, i32(2**31 - 1)),
        (ApiKey.OFFSET_FETCH, string("g") + i32(-5)),
    ],
    ids=["huge", "one-short", "max", "negative"],
)
def test_counts_that_cannot_fit_are_invalid_requests(api_key, body):
    with pytest.raises(ProtocolError) as info:
        decode_request(request_frame(api_key, 1, "c", body))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_null_topic_and_null_message_set_are_invalid_requests():
    null_topic = request_frame(5, 1, "c", string(None))
    null_data = request_frame(0, 1, "c", i16(1) + i32(0) + array(string("t") + i32(0) + i32(-1)))
    for frame in (null_topic, null_data):
        with pytest.raises(ProtocolError, match="null"):
            decode_request(frame)


def test_unknown_error_codes_are_kept_as_ints():
    _, response = decode_response(ApiKey.DELETE_TOPIC, i32(1) + i16(999) + string(None))
    assert response.error_code == 999 and not isinstance(response.error_code, ErrorCode)
    _, response = decode_response(ApiKey.DELETE_TOPIC, i32(1) + i16(3) + string(None))
    assert response.error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_decoded_bodies_are_the_frozen_objects_their_constructors_make():
    # the decoder sets a response's slots itself, bypassing __init__
    partition = MetadataPartition(3, ErrorCode.STORAGE_ERROR, 1, -1, 2**63 - 1, None)
    response = MetadataResponse(1, (MetadataBroker(1, "h", 2, None),),
                                (MetadataTopic("t", ErrorCode.NONE, (partition,)),))
    _, decoded = decode_response(ApiKey.METADATA, encode_response(5, response)[4:])
    (got,) = decoded.topics[0].partitions
    assert decoded == response and type(got) is MetadataPartition
    assert hash(got) == hash(partition) and repr(got) == repr(partition)
    assert got.error_code is ErrorCode.STORAGE_ERROR
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.partition = 4
    with pytest.raises((AttributeError, TypeError)):
        got.other = 1  # slots: no other attribute


def test_decode_response_of_unknown_api():
    with pytest.raises(ProtocolError) as info:
        decode_response(8, i32(1))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_error_frame():
    encoded = encode_error_frame(77, ErrorCode.UNSUPPORTED_VERSION)
    assert encoded == i32(6) + i32(77) + i16(8)
    assert is_error_frame(encoded[4:])
    assert decode_error_frame(encoded[4:]) == (77, ErrorCode.UNSUPPORTED_VERSION)
    with pytest.raises(ProtocolError):
        decode_error_frame(encoded[4:] + b"\x00")


@pytest.mark.parametrize(
    "smallest",
    [ProduceResponse(()), FetchResponse(()), OffsetsResponse(0, ()), MetadataResponse(0, (), ()),
     AdminResponse(0, None), OffsetCommitResponse(()), OffsetFetchResponse(())],
    ids=lambda response: type(response).__name__,
)
def test_no_response_is_as_short_as_an_error_frame(smallest):
    assert len(encode_response(1, smallest)) - 4 >= 8


def test_peek_produce_acks():
    produce = ProduceRequest(-1, 10, (ProducePartition("t", 0, b"x"),))
    assert peek_produce_acks(encode_request(produce, 1, "some client")[4:]) == -1
    assert peek_produce_acks(encode_request(produce, 1, None)[4:]) == -1
    assert peek_produce_acks(encode_request(MetadataRequest(), 1)[4:]) is None
    assert peek_produce_acks(request_frame(0, 1, "c", b"\x00")) is None
    assert peek_produce_acks(request_frame(0, 1, "c", i16(0), api_version=1)) is None
    assert peek_produce_acks(request_frame(0, 1, "c", i16(0))) == 0
    assert peek_produce_acks(i16(0) + i16(0) + i32(1) + i16(-3) + i16(0)) is None
    assert peek_produce_acks(b"\x00\x00") is None


def test_encoding_a_value_that_does_not_fit_is_a_value_error():
    with pytest.raises(ValueError):
        encode_request(OffsetsRequest("t", 2**31, 0, 1), 1)
    with pytest.raises(ValueError):
        encode_response(1, AdminResponse(0, "x" * 40000))
