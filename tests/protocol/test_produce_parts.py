"""A producer's request as buffers: the message sets themselves, no copy."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostbroker.protocol import api

from tests.protocol.strategies import NO_DEADLINE, int32s, message_sets, names

acks = st.sampled_from([-1, 0, 1])


@NO_DEADLINE
@given(
    acks,
    int32s,
    int32s,
    st.one_of(st.none(), names),
    st.lists(st.tuples(names, int32s, st.lists(message_sets, max_size=4)), max_size=4),
)
def test_joined_parts_are_the_request_frame(ack, timeout_ms, correlation_id, client_id,
                                            partitions):
    parts = api.encode_produce_request_parts(ack, timeout_ms, partitions, correlation_id,
                                             client_id)
    request = api.ProduceRequest(ack, timeout_ms, tuple(
        api.ProducePartition(topic, partition, b"".join(sets))
        for topic, partition, sets in partitions))
    assert b"".join(parts) == api.encode_request(request, correlation_id, client_id)
    # Each set is passed through as the object given, not a copy of it.
    given_sets = [s for _, _, sets in partitions for s in sets]
    assert all(any(part is s for part in parts) for s in given_sets)


def test_a_set_too_large_for_its_length_field_is_a_value_error():
    class Huge(bytes):
        def __len__(self):
            return 2**31

    with pytest.raises(ValueError, match="does not fit"):
        api.encode_produce_request_parts(1, 1000, [("t", 0, [Huge()])], 1)
