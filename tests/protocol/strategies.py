"""Hypothesis strategies for every request and response body.

Written out by hand from docs/spec/protocol.md rather than derived from the codec's own
declarations, so that a mistake in those declarations shows up as a failure.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode
from hostbroker.protocol import (
    AdminResponse,
    MetadataBroker,
    CreateTopicRequest,
    DeleteTopicRequest,
    FetchPartition,
    FetchPartitionResult,
    FetchRequest,
    FetchResponse,
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
)

# Timing belongs to the benchmarks; a loaded test machine must not fail a
# property test for being slow.
NO_DEADLINE = settings(deadline=None)

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)
nullable_names = st.none() | names
message_sets = st.binary(max_size=48)
# Codes this version does not know must survive too.
error_codes = st.sampled_from(list(ErrorCode)) | int16s


def tuples_of(items: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(items, max_size=4).map(tuple)


produce_requests = st.builds(
    ProduceRequest,
    int16s,
    int32s,
    tuples_of(st.builds(ProducePartition, names, int32s, message_sets)),
)
produce_responses = st.builds(
    ProduceResponse,
    tuples_of(st.builds(ProducePartitionResult, names, int32s, error_codes, int64s, int64s)),
)
fetch_requests = st.builds(
    FetchRequest,
    int32s,
    int32s,
    tuples_of(st.builds(FetchPartition, names, int32s, int64s, int32s)),
)
fetch_responses = st.builds(
    FetchResponse,
    tuples_of(st.builds(FetchPartitionResult, names, int32s, error_codes, int64s, message_sets)),
)
offsets_requests = st.builds(OffsetsRequest, names, int32s, int64s, int32s)
offsets_responses = st.builds(OffsetsResponse, error_codes, tuples_of(int64s))
metadata_requests = st.builds(MetadataRequest, tuples_of(names))
metadata_responses = st.builds(
    MetadataResponse,
    int32s,
    tuples_of(st.builds(MetadataBroker, int32s, nullable_names, int32s, nullable_names)),
    tuples_of(
        st.builds(
            MetadataTopic,
            names,
            error_codes,
            tuples_of(
                st.builds(
                    MetadataPartition, int32s, error_codes, int32s, int64s, int64s, nullable_names
                )
            ),
        )
    ),
)
create_topic_requests = st.builds(
    CreateTopicRequest, names, int32s, tuples_of(st.builds(TopicConfigEntry, names, names))
)
delete_topic_requests = st.builds(DeleteTopicRequest, names)
admin_responses = st.builds(AdminResponse, error_codes, nullable_names)
offset_commit_requests = st.builds(
    OffsetCommitRequest,
    names,
    tuples_of(st.builds(OffsetCommitPartition, names, int32s, int64s, nullable_names)),
)
offset_commit_responses = st.builds(
    OffsetCommitResponse,
    tuples_of(st.builds(OffsetCommitPartitionResult, names, int32s, error_codes)),
)
offset_fetch_requests = st.builds(
    OffsetFetchRequest, names, tuples_of(st.builds(OffsetFetchPartition, names, int32s))
)
offset_fetch_responses = st.builds(
    OffsetFetchResponse,
    tuples_of(
        st.builds(OffsetFetchPartitionResult, names, int32s, int64s, nullable_names, error_codes)
    ),
)

requests = st.one_of(
    produce_requests,
    fetch_requests,
    offsets_requests,
    metadata_requests,
    create_topic_requests,
    delete_topic_requests,
    offset_commit_requests,
    offset_fetch_requests,
)

# (api_key, response) pairs: the api key is what a client knows when it decodes.
responses_by_api = st.one_of(
    st.tuples(st.just(0), produce_responses),
    st.tuples(st.just(1), fetch_responses),
    st.tuples(st.just(2), offsets_responses),
    st.tuples(st.just(3), metadata_responses),
    st.tuples(st.sampled_from([4, 5]), admin_responses),
    st.tuples(st.just(6), offset_commit_responses),
    st.tuples(st.just(7), offset_fetch_responses),
)
