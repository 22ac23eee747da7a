"""The broker's zero-copy fetch answer: header chunks around sendfile data."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostbroker.protocol import (
    FetchPartitionHeader,
    FetchPartitionResult,
    FetchResponse,
    decode_response,
    encode_fetch_response_parts,
    encode_response,
)

from tests.protocol.strategies import NO_DEADLINE, error_codes, int32s, int64s, message_sets, names


def interleave(headers, message_sets):
    out = bytearray(headers[0])
    for data, header in zip(message_sets, headers[1:]):
        out += data + header
    return bytes(out)


@NO_DEADLINE
@given(
    int32s,
    st.lists(st.tuples(names, int32s, error_codes, int64s, message_sets), max_size=5),
)
def test_parts_joined_with_the_data_equal_the_whole_response(correlation_id, partitions):
    headers = encode_fetch_response_parts(
        correlation_id,
        [FetchPartitionHeader(t, p, code, leo, len(data)) for t, p, code, leo, data in partitions],
    )
    assert len(headers) == len(partitions) + 1
    if partitions:
        assert headers[-1] == b""
    joined = interleave(headers, [data for *_, data in partitions])
    expected = encode_response(
        correlation_id, FetchResponse(tuple(FetchPartitionResult(*p) for p in partitions))
    )
    assert joined == expected
    assert decode_response(1, joined[4:])[0] == correlation_id


def test_size_prefix_counts_data_not_yet_sent():
    headers = encode_fetch_response_parts(1, [("t", 0, 0, 10**9, 1_000_000)])
    size = int.from_bytes(headers[0][:4], "big")
    assert size == len(headers[0]) - 4 + 1_000_000


def test_negative_data_length_is_refused():
    with pytest.raises(ValueError):
        encode_fetch_response_parts(1, [("t", 0, 0, 0, -1)])
