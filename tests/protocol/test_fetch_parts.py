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
from hostbroker.protocol import api

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


_one_partition = st.tuples(
    st.one_of(names, st.builds(lambda n: "é" * n, st.integers(16380, 16390)), st.just("\ud800")),
    st.one_of(int32s, st.integers(2**31, 2**33)),
    st.one_of(error_codes, st.integers(2**15, 2**16)),
    st.one_of(int64s, st.integers(2**63, 2**64)),
    st.one_of(st.integers(-2, 1 << 20), st.integers(2**31 - 64, 2**31 + 64)),
)


@NO_DEADLINE
@given(st.one_of(int32s, st.integers(2**31, 2**32)), _one_partition)
def test_one_partition_takes_a_shorter_way_to_the_same_bytes(correlation_id, partition):
    """A writer's long-poll answer and most fetches have one partition; the
    two packs that build its headers give what the general loop gives, and
    fail (ValueError) wherever it fails."""
    def run(encode, parts):
        try:
            return encode(correlation_id, parts)
        except ValueError:
            return ValueError

    assert run(encode_fetch_response_parts, [partition]) == run(api._fetch_parts, [partition])
