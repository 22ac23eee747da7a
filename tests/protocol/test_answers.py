"""Every answer the broker builds is encodable, whatever the request held.

The broker answers through :func:`api.encode_answer`, which never raises: an
answer that does not fit its wire types or is over the answer limit becomes
an error frame. Requests here carry what a hostile client may send (strings
up to the 32,767-byte field limit, any ints), and answers echo them the ways
the handler does (topic names per partition, messages naming the topic,
committed metadata).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.workers.handler_topics import admin_answer
from tests.protocol.strategies import int16s, int32s, int64s, responses_by_api

PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# What fits a string field: up to 32,767 UTF-8 bytes, often long, any characters.
wire_strings = st.one_of(
    st.text(max_size=20),
    st.builds(lambda c, n: (c * n).encode("utf-8", "replace")[:32767].decode("utf-8", "ignore"),
              st.characters(blacklist_categories=("Cs",)), st.integers(0, 32767)),
)
# What a caller might put into an answer by mistake: over the field, or not UTF-8.
unencodable_strings = st.one_of(
    st.builds(lambda n: "y" * n, st.integers(32768, 70000)),
    st.just("\ud800 lone surrogate"),
)
codes = st.sampled_from(list(ErrorCode))


def echo_answers(request: api.Request, text: str) -> list[api.Response]:
    """Answers of the shapes the handler builds for ``request``, echoing it."""
    key = request.API_KEY
    if key == api.ApiKey.PRODUCE:
        return [api.ProduceResponse(tuple(api.ProducePartitionResult(
            p.topic, p.partition, ErrorCode.INVALID_REQUEST, -1, -1) for p in request.partitions))]
    if key == api.ApiKey.FETCH:
        return [api.FetchResponse(tuple(api.FetchPartitionResult(
            p.topic, p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, b"")
            for p in request.partitions))]
    if key == api.ApiKey.METADATA:
        return [api.MetadataResponse(0, (api.MetadataBroker(0, text, 9092, text),), tuple(
            api.MetadataTopic(t, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()) for t in request.topics))]
    if key in (api.ApiKey.CREATE_TOPIC, api.ApiKey.DELETE_TOPIC):
        return [admin_answer(ErrorCode.INVALID_TOPIC, f"invalid topic name {request.topic!r}"),
                admin_answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {request.topic}"),
                admin_answer(ErrorCode.STORAGE_ERROR, "; ".join([text] * 5))]
    if key == api.ApiKey.OFFSET_COMMIT:
        return [api.OffsetCommitResponse(tuple(api.OffsetCommitPartitionResult(
            p.topic, p.partition, ErrorCode.NONE) for p in request.partitions))]
    if key == api.ApiKey.OFFSET_FETCH:
        return [api.OffsetFetchResponse(tuple(api.OffsetFetchPartitionResult(
            p.topic, p.partition, 7, text, ErrorCode.NONE) for p in request.partitions))]
    return [api.OffsetsResponse(ErrorCode.NONE, (request.time,))]


def few(items):
    return st.lists(items, max_size=3).map(tuple)


hostile_requests = st.one_of(
    st.builds(api.ProduceRequest, int16s, int32s,
              few(st.builds(api.ProducePartition, wire_strings, int32s, st.just(b"")))),
    st.builds(api.FetchRequest, int32s, int32s,
              few(st.builds(api.FetchPartition, wire_strings, int32s, int64s, int32s))),
    st.builds(api.OffsetsRequest, wire_strings, int32s, int64s, int32s),
    st.builds(api.MetadataRequest, few(wire_strings)),
    st.builds(api.CreateTopicRequest, wire_strings, int32s,
              few(st.builds(api.TopicConfigEntry, wire_strings, wire_strings))),
    st.builds(api.DeleteTopicRequest, wire_strings),
    st.builds(api.OffsetCommitRequest, wire_strings,
              few(st.builds(api.OffsetCommitPartition, wire_strings, int32s, int64s,
                            st.none() | wire_strings))),
    st.builds(api.OffsetFetchRequest, wire_strings,
              few(st.builds(api.OffsetFetchPartition, wire_strings, int32s))),
)


def check_answer(frame: bytes, is_error: bool, api_key: int, correlation_id: int,
                 max_bytes: int) -> None:
    assert len(frame) <= max(max_bytes, api.SIZE_PREFIX_BYTES + api.ERROR_FRAME_SIZE)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - api.SIZE_PREFIX_BYTES
    body = frame[api.SIZE_PREFIX_BYTES:]
    if is_error:
        assert api.decode_error_frame(body) == (correlation_id, ErrorCode.INVALID_REQUEST)
    else:
        assert api.decode_response(api_key, body)[0] == correlation_id


@PROPERTY
@given(hostile_requests, wire_strings, int32s, st.sampled_from([1024, 65536, 2**30]))
def test_answers_echoing_any_request_are_encoded(request, text, correlation_id, max_bytes):
    # The request itself came off the wire, so it is encodable.
    api.decode_request(api.encode_request(request, correlation_id)[api.SIZE_PREFIX_BYTES:])
    for response in echo_answers(request, text):
        frame, is_error = api.encode_answer(correlation_id, response, max_bytes)
        check_answer(frame, is_error, request.API_KEY, correlation_id, max_bytes)
        if isinstance(response, api.AdminResponse):
            # Messages are clipped, so admin answers fit any allowed response.max.bytes.
            assert max_bytes < 2048 or not is_error
            assert len((response.error_message or "").encode()) <= api.MAX_ECHOED_TEXT


@PROPERTY
@given(responses_by_api, int32s)
def test_any_response_is_an_answer_or_an_error_frame(pair, correlation_id):
    api_key, response = pair
    for max_bytes in (1024, 2**30):
        frame, is_error = api.encode_answer(correlation_id, response, max_bytes)
        check_answer(frame, is_error, api_key, correlation_id, max_bytes)


@PROPERTY
@given(unencodable_strings, codes, int32s)
def test_an_unencodable_answer_becomes_an_error_frame(text, code, correlation_id):
    for response in (api.AdminResponse(code, text),
                     api.OffsetFetchResponse((api.OffsetFetchPartitionResult(
                         "t", 0, 1, text, ErrorCode.NONE),)),
                     api.OffsetsResponse(code, (2**63,))):
        frame, is_error = api.encode_answer(correlation_id, response, 2**30)
        assert is_error
        assert frame == api.encode_error_frame(correlation_id, ErrorCode.INVALID_REQUEST)


@PROPERTY
@given(st.text(), st.integers(8, 4096))
def test_clip_text_fits_and_keeps_what_fits(text, max_bytes):
    clipped = api.clip_text(text, max_bytes)
    encoded = clipped.encode("utf-8")
    assert len(encoded) <= max_bytes
    original = text.encode("utf-8", "replace")
    if len(original) <= max_bytes:
        assert encoded == original
    else:
        assert clipped.endswith("...")
        assert original.startswith(encoded[:-3])


def test_fetch_answer_parts_over_two_gib_are_refused():
    parts = [("t", 0, 0, 0, 2**30)] * 2
    with pytest.raises(ValueError):
        api.encode_fetch_response_parts(1, parts)


# Entries per request, checked while decoding.


def _metadata_frame(count: int) -> bytes:
    return api.encode_request(api.MetadataRequest(("a",) * count), 1)[api.SIZE_PREFIX_BYTES:]


@pytest.mark.parametrize("count, refused", [(0, False), (10, False), (11, True), (10**6, True)])
def test_arrays_over_max_entries_are_refused(count, refused):
    frame = _metadata_frame(count)
    if refused:
        with pytest.raises(ProtocolError) as e:
            api.decode_request(frame, max_entries=10)
        assert e.value.code == ErrorCode.INVALID_REQUEST
        assert "limit of 10 entries" in str(e.value)
    else:
        assert len(api.decode_request(frame, max_entries=10)[1].topics) == count
    # Without a limit only the bytes bound it.
    assert len(api.decode_request(frame)[1].topics) == count


def test_max_entries_counts_all_arrays_of_a_request():
    request = api.CreateTopicRequest("t", 1, tuple(api.TopicConfigEntry("k", "v")
                                                   for _ in range(6)))
    frame = api.encode_request(request, 1)[api.SIZE_PREFIX_BYTES:]
    assert api.decode_request(frame, max_entries=6)[1] == request
    with pytest.raises(ProtocolError):
        api.decode_request(frame, max_entries=5)
