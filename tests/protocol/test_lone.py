"""The one-partition PRODUCE and FETCH fast paths read and write what the
schema codec does.

:func:`peek_lone_produce` and :func:`peek_lone_fetch` must accept exactly
the frames that ``decode_request`` decodes into a PRODUCE (or FETCH) of one
partition (with a topic), with the same fields, and refuse every other
frame; whatever bytes a hostile client sends. :func:`fetch_partition_count`
must give the count of every FETCH the codec decodes, and None for every
other request. :func:`encode_lone_produce_answer` must give the bytes
of ``encode_answer``, error frames included.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol.lone import (
    encode_lone_produce_answer,
    fetch_partition_count,
    peek_lone_fetch,
    peek_lone_produce,
)
from tests.protocol.strategies import (
    error_codes,
    int16s,
    int32s,
    int64s,
    message_sets,
    names,
)

PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

client_ids = st.none() | st.text(max_size=8)
lone_requests = st.builds(
    lambda acks, timeout, topic, partition, data: api.ProduceRequest(
        acks, timeout, (api.ProducePartition(topic, partition, data),)),
    int16s, int32s, names, int32s, message_sets)
other_requests = st.one_of(
    st.builds(api.ProduceRequest, int16s, int32s, st.lists(
        st.builds(api.ProducePartition, names, int32s, message_sets), max_size=3).filter(
            lambda parts: len(parts) != 1).map(tuple)),
    st.builds(api.FetchRequest, int32s, int32s, st.just(
        (api.FetchPartition("t", 0, 0, 100),))),
    st.builds(api.MetadataRequest, st.just(("t",))),
)


def _frame(request, correlation_id: int, client_id) -> bytes:
    return api.encode_request(request, correlation_id, client_id)[api.SIZE_PREFIX_BYTES:]


def _decoded(frame: bytes, max_entries=None):
    """What decode_request makes of ``frame`` as a lone PRODUCE, or None."""
    try:
        header, request = api.decode_request(frame, max_entries)
    except ProtocolError:
        return None
    if (header.api_key != api.ApiKey.PRODUCE or len(request.partitions) != 1
            or request.partitions[0].topic is None):
        return None
    part = request.partitions[0]
    return (header.correlation_id, request.acks, request.timeout_ms, part.topic,
            part.partition, bytes(part.message_set))


def _damaged(frame: bytes, data) -> bytes:
    """``frame`` cut, extended, with one byte changed, or with a length field
    or count set to anything (-1 and 0x80.. included)."""
    frame = bytearray(frame)
    how = data.draw(st.sampled_from(["cut", "extend", "byte", "length"]))
    if how == "cut":
        del frame[data.draw(st.integers(0, len(frame) - 1)):]
    elif how == "extend":
        frame += data.draw(st.binary(min_size=1, max_size=8))
    elif how == "byte":
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    else:
        at = data.draw(st.integers(0, len(frame) - 2))
        frame[at:at + 2] = struct.pack(">h", data.draw(int16s))
    return bytes(frame)


def _peeked(frame: bytes, max_entries=None):
    peeked = peek_lone_produce(frame, max_entries)
    if peeked is None:
        return None
    return (*peeked[:5], bytes(peeked.message_set))


@PROPERTY
@given(lone_requests, int32s, client_ids)
def test_a_lone_produce_reads_as_the_codec_reads_it(request, correlation_id, client_id):
    frame = _frame(request, correlation_id, client_id)
    assert _peeked(frame) == _decoded(frame) is not None
    peeked = peek_lone_produce(memoryview(frame))  # as a processor hands it over
    assert bytes(peeked.message_set) == bytes(request.partitions[0].message_set)


@PROPERTY
@given(other_requests, int32s, client_ids)
def test_any_other_request_is_refused(request, correlation_id, client_id):
    assert peek_lone_produce(_frame(request, correlation_id, client_id)) is None


@PROPERTY
@given(lone_requests, int32s, client_ids, st.data())
def test_a_damaged_frame_is_refused_whenever_the_codec_refuses_it(request, correlation_id,
                                                                  client_id, data):
    frame = _damaged(_frame(request, correlation_id, client_id), data)
    max_entries = data.draw(st.none() | st.integers(0, 2))
    assert _peeked(frame, max_entries) == _decoded(frame, max_entries)


@given(st.binary(max_size=64))
def test_random_bytes_read_as_the_codec_reads_them(frame):
    assert _peeked(frame) == _decoded(frame)
    assert _peeked_fetch(frame) == _decoded_fetch(frame)


def test_a_client_id_or_topic_that_is_not_utf8_is_refused():
    good = _frame(api.ProduceRequest(1, 100, (api.ProducePartition("tü", 0, b"x"),)), 7, "cé")
    for bad in (good.replace("cé".encode(), b"c\xff"), good.replace("tü".encode(), b"t\xff")):
        assert _decoded(bad) is None
        assert peek_lone_produce(bad) is None


@PROPERTY
@given(st.one_of(names, st.builds(lambda n: "é" * n, st.integers(16300, 16500)),
                 st.just("\ud800")), int32s,
       st.one_of(int32s, st.integers(2**31, 2**40)), error_codes,
       st.one_of(int64s, st.integers(2**63, 2**65)), int64s,
       st.sampled_from([10, 40, 1 << 20]))
def test_an_answer_is_what_the_codec_writes(topic, correlation_id, partition, code, base, end,
                                            max_bytes):
    expected = api.encode_answer(correlation_id, api.ProduceResponse((
        api.ProducePartitionResult(topic, partition, code, base, end),)), max_bytes)
    assert encode_lone_produce_answer(correlation_id, topic, partition, code, base, end,
                                      max_bytes) == expected


def test_an_answer_with_an_error_code_is_what_the_codec_writes():
    expected = api.encode_answer(5, api.ProduceResponse((api.ProducePartitionResult(
        "t", 3, ErrorCode.INVALID_MESSAGE, -1, -1),)), 1 << 20)
    assert encode_lone_produce_answer(5, "t", 3, ErrorCode.INVALID_MESSAGE, -1, -1,
                                      1 << 20) == expected
    assert expected[1] is False


# -- FETCH ---------------------------------------------------------------------
lone_fetches = st.builds(
    lambda wait, min_bytes, topic, partition, offset, max_bytes: api.FetchRequest(
        wait, min_bytes, (api.FetchPartition(topic, partition, offset, max_bytes),)),
    int32s, int32s, names, int32s, int64s, int32s)
other_than_lone_fetches = st.one_of(
    st.builds(api.FetchRequest, int32s, int32s, st.lists(
        st.builds(api.FetchPartition, names, int32s, int64s, int32s), max_size=3).filter(
            lambda parts: len(parts) != 1).map(tuple)),
    lone_requests,
    st.builds(api.MetadataRequest, st.just(("t",))),
)


def _decoded_fetch(frame: bytes, max_entries=None):
    """What decode_request makes of ``frame`` as a lone FETCH, or None."""
    try:
        header, request = api.decode_request(frame, max_entries)
    except ProtocolError:
        return None
    if (header.api_key != api.ApiKey.FETCH or len(request.partitions) != 1
            or request.partitions[0].topic is None):
        return None
    part = request.partitions[0]
    return (header.correlation_id, request.max_wait_ms, request.min_bytes, part.topic,
            part.partition, part.offset, part.max_bytes)


def _peeked_fetch(frame: bytes, max_entries=None):
    peeked = peek_lone_fetch(frame, max_entries)
    return None if peeked is None else tuple(peeked)


@PROPERTY
@given(lone_fetches, int32s, client_ids)
def test_a_lone_fetch_reads_as_the_codec_reads_it(request, correlation_id, client_id):
    frame = _frame(request, correlation_id, client_id)
    assert _peeked_fetch(frame) == _decoded_fetch(frame) is not None
    assert tuple(peek_lone_fetch(memoryview(frame))) == _decoded_fetch(frame)


@PROPERTY
@given(other_than_lone_fetches, int32s, client_ids)
def test_any_request_but_a_lone_fetch_is_refused(request, correlation_id, client_id):
    assert peek_lone_fetch(_frame(request, correlation_id, client_id)) is None


@PROPERTY
@given(lone_fetches, int32s, client_ids, st.data())
def test_a_damaged_fetch_is_refused_whenever_the_codec_refuses_it(request, correlation_id,
                                                                 client_id, data):
    frame = _damaged(_frame(request, correlation_id, client_id), data)
    max_entries = data.draw(st.none() | st.integers(0, 2))
    assert _peeked_fetch(frame, max_entries) == _decoded_fetch(frame, max_entries)


def test_a_fetch_whose_client_id_or_topic_is_not_utf8_is_refused():
    good = _frame(api.FetchRequest(100, 1, (api.FetchPartition("tü", 0, 5, 1000),)), 7, "cé")
    assert _peeked_fetch(good) == _decoded_fetch(good) is not None
    for bad in (good.replace("cé".encode(), b"c\xff"), good.replace("tü".encode(), b"t\xff")):
        assert _decoded_fetch(bad) is None
        assert peek_lone_fetch(bad) is None


_REFUSED = object()


def _codec_count(frame: bytes):
    """The partitions' count ``decode_request`` gives ``frame`` as a FETCH,
    None as any other request, ``_REFUSED`` when it refuses it."""
    try:
        header, request = api.decode_request(frame)
    except ProtocolError:
        return _REFUSED
    return len(request.partitions) if header.api_key == api.ApiKey.FETCH else None


@PROPERTY
@given(st.one_of(lone_fetches, other_than_lone_fetches), int32s, client_ids, st.data())
def test_a_fetch_tells_its_partitions_count(request, correlation_id, client_id, data):
    """Whole, the count the codec decodes (None for any other request);
    damaged, the same whenever the codec takes the frame (what it says of a
    frame the codec refuses promises nothing: the caller decodes)."""
    frame = _frame(request, correlation_id, client_id)
    assert fetch_partition_count(frame) == _codec_count(frame)
    damaged = _damaged(frame, data)
    count = _codec_count(damaged)
    if count is not _REFUSED:
        assert fetch_partition_count(damaged) == count


@given(st.binary(max_size=64))
def test_random_bytes_tell_a_count_only_for_a_fetch(frame):
    count = _codec_count(frame)
    if count is not _REFUSED:
        assert fetch_partition_count(frame) == count
