"""What the ways past the handler need to take PRODUCE v1 and FETCH v2: the
one-partition readers of :mod:`hostbroker.protocol.lone` read those
versions (and only the version asked for) as version 0, and a PRODUCE v0
answer made version 1's is the codec's answer of version 1 with a throttle
time of 0."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api, throttled
from hostbroker.protocol.lone import (
    encode_lone_produce_answer,
    fetch_partition_count,
    peek_lone_fetch,
    peek_lone_produce,
)
from tests.protocol.strategies import error_codes, int16s, int32s, int64s, message_sets, names

PROPERTY = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(int16s, int32s, names, int32s, message_sets, int32s)
def test_a_lone_produce_v1_reads_as_version_0_only_when_asked_for(acks, timeout, topic,
                                                                  partition, data, corr):
    parts = (api.ProducePartition(topic, partition, data),)
    v0 = api.encode_request(api.ProduceRequest(acks, timeout, parts), corr)[4:]
    v1 = api.encode_request(throttled.ProduceRequestV1(acks, timeout, parts), corr)[4:]
    read0 = peek_lone_produce(v0, None)
    read1 = peek_lone_produce(v1, None, throttled.PRODUCE_V1)
    assert read0 is not None and read1 is not None
    assert read1._replace(message_set=None) == read0._replace(message_set=None)
    assert bytes(read1.message_set) == bytes(read0.message_set) == data
    assert peek_lone_produce(v1, None) is None
    assert peek_lone_produce(v0, None, throttled.PRODUCE_V1) is None
    assert peek_lone_produce(v1, None, 2) is None


@PROPERTY
@given(int32s, int32s, st.lists(st.tuples(names, int32s, int64s, int32s), min_size=1,
                                max_size=4), int32s)
def test_a_fetch_v2_reads_as_version_0_only_when_asked_for(wait, min_bytes, parts, corr):
    partitions = tuple(api.FetchPartition(*p) for p in parts)
    v0 = api.encode_request(api.FetchRequest(wait, min_bytes, partitions), corr)[4:]
    v2 = api.encode_request(throttled.FetchRequestV2(wait, min_bytes, partitions), corr)[4:]
    assert fetch_partition_count(v2, throttled.FETCH_V2) == fetch_partition_count(v0) == len(parts)
    assert fetch_partition_count(v2) is None and fetch_partition_count(v0, 2) is None
    assert peek_lone_fetch(v2, None, throttled.FETCH_V2) == peek_lone_fetch(v0, None)
    assert peek_lone_fetch(v2, None) is None and peek_lone_fetch(v0, None, 2) is None
    if len(parts) == 1:
        assert peek_lone_fetch(v2, None, throttled.FETCH_V2) is not None


@PROPERTY
@given(int32s, names, int32s, error_codes, int64s, int64s)
def test_a_produce_answer_made_version_1_is_the_codecs(corr, topic, partition, code, base,
                                                       end):
    frame, failed = encode_lone_produce_answer(corr, topic, partition, code, base, end, 1 << 20)
    v1 = throttled.produce_v1_frame(frame)
    if failed:
        assert v1 == frame  # an error frame is every version's
        return
    body = throttled.ProduceResponseV1((api.ProducePartitionResult(topic, partition, code, base,
                                                                   end),))
    assert v1 == api.encode_response(corr, body)
    assert throttled.decode_response(v1[4:], throttled.ProduceResponseV1) == (corr, body)


def test_an_error_frame_stays_as_it_is():
    error = api.encode_error_frame(5, ErrorCode.INVALID_REQUEST)
    assert throttled.produce_v1_frame(error) == error
