"""The group APIs and OFFSET_COMMIT v1 (docs/spec/groups.md): exact bytes, round
trips, every bound refused at decode, and the broker's decoder left as it was."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import (
    OffsetCommitPartition,
    OffsetCommitPartitionResult,
    OffsetCommitResponse,
    decode_request,
    encode_request,
    encode_response,
)
from hostbroker.protocol.groups import (
    MAX_STREAMS_PER_TOPIC,
    GroupApiKey,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequestV1,
    StreamAssignment,
    SubscribedTopic,
    SyncGroupRequest,
    SyncGroupResponse,
    decode_any_request,
    decode_group_response,
)

from tests.protocol.strategies import NO_DEADLINE, error_codes, int32s, int64s, requests
from tests.protocol.wire import array, i16, i32, i64, request_frame, string

JOIN = JoinGroupRequest("g", 6000, 30000, "", (SubscribedTopic("t", 2), SubscribedTopic("u", 1)))
SYNC = SyncGroupRequest("g", 3, "m-1")
BEAT = HeartbeatRequest("g", 3, "m-1")
LEAVE = LeaveGroupRequest("g", "m-1")
COMMIT = OffsetCommitRequestV1("g", 3, "m-1", (OffsetCommitPartition("t", 1, 42, None),))

# (request, api_version, body written from docs/spec/groups.md)
REQUEST_BODIES = [
    (JOIN, 0, string("g") + i32(6000) + i32(30000) + string("")
     + array(string("t") + i32(2), string("u") + i32(1))),
    (SYNC, 0, string("g") + i32(3) + string("m-1")),
    (BEAT, 0, string("g") + i32(3) + string("m-1")),
    (LEAVE, 0, string("g") + string("m-1")),
    (COMMIT, 1, string("g") + i32(3) + string("m-1")
     + array(string("t") + i32(1) + i64(42) + string(None))),
]

RESPONSE_BODIES = [
    (GroupApiKey.JOIN_GROUP, 0, JoinGroupResponse(ErrorCode.NONE, 4, "m-1", ("m-1", "m-2")),
     i16(0) + i32(4) + string("m-1") + array(string("m-1"), string("m-2"))),
    (GroupApiKey.SYNC_GROUP, 0,
     SyncGroupResponse(ErrorCode.NONE, (StreamAssignment("t", 0, (0, 1)),
                                        StreamAssignment("t", 1, ()))),
     i16(0) + array(string("t") + i32(0) + array(i32(0), i32(1)), string("t") + i32(1) + array())),
    (GroupApiKey.SYNC_GROUP, 0, SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS), i16(18) + array()),
    (GroupApiKey.HEARTBEAT, 0, HeartbeatResponse(ErrorCode.ILLEGAL_GENERATION), i16(17)),
    (GroupApiKey.LEAVE_GROUP, 0, LeaveGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID), i16(16)),
    (6, 1, OffsetCommitResponse((OffsetCommitPartitionResult("t", 1, ErrorCode.ILLEGAL_GENERATION),)),
     array(string("t") + i32(1) + i16(17))),
]


def ids(cases):
    return [type(case[0]).__name__ if not isinstance(case[0], int) else type(case[2]).__name__
            for case in cases]


@pytest.mark.parametrize("request_, version, body", REQUEST_BODIES, ids=ids(REQUEST_BODIES))
def test_request_bytes_are_the_spec(request_, version, body):
    frame = encode_request(request_, 77, "c")
    assert frame[4:] == request_frame(request_.API_KEY, 77, "c", body, api_version=version)
    header, decoded = decode_any_request(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (request_.API_KEY, version, 77)
    assert decoded == request_
    with pytest.raises(ProtocolError, match="left over"):
        decode_any_request(frame[4:] + b"\x00")
    for end in range(len(frame) - 4):
        with pytest.raises(ProtocolError) as info:
            decode_any_request(frame[4:4 + end])
        assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("api_key, version, response, body", RESPONSE_BODIES,
                         ids=ids(RESPONSE_BODIES))
def test_response_bytes_are_the_spec(api_key, version, response, body):
    frame = encode_response(-3, response)
    assert frame[4:] == i32(-3) + body
    assert decode_group_response(api_key, version, frame[4:]) == (-3, response)


@pytest.mark.parametrize("request_, _version, _body", REQUEST_BODIES, ids=ids(REQUEST_BODIES))
def test_the_brokers_decoder_still_answers_them_unsupported(request_, _version, _body):
    with pytest.raises(ProtocolError) as info:
        decode_request(encode_request(request_, 1)[4:])
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("api_key, version", [(8, 1), (11, -1), (6, 2), (14, 0), (12, 1), (9, 7)])
def test_other_versions_are_unsupported(api_key, version):
    with pytest.raises(ProtocolError) as info:
        decode_any_request(request_frame(api_key, 1, "c", string("g"), api_version=version))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(ProtocolError) as info:
        decode_group_response(api_key, version, i32(1))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


# -- round trips -------------------------------------------------------------

group_ids = st.text(min_size=1, max_size=20)
member_ids = st.text(min_size=1, max_size=20)
positive = st.integers(1, 2**31 - 1)
generations = st.integers(0, 2**31 - 1)
subscriptions = st.dictionaries(st.text(min_size=1, max_size=10), st.integers(1, MAX_STREAMS_PER_TOPIC),
                                min_size=1, max_size=4)
join_requests = st.builds(
    JoinGroupRequest, group_ids, positive, positive, st.just("") | member_ids,
    subscriptions.map(lambda d: tuple(SubscribedTopic(t, n) for t, n in d.items())))
group_requests = st.one_of(
    join_requests,
    st.builds(SyncGroupRequest, group_ids, generations, member_ids),
    st.builds(HeartbeatRequest, group_ids, generations, member_ids),
    st.builds(LeaveGroupRequest, group_ids, member_ids),
    st.builds(OffsetCommitRequestV1, group_ids,
              st.just(-1), st.just(""),
              st.lists(st.builds(OffsetCommitPartition, st.text(max_size=8), int32s, int64s,
                                 st.none() | st.text(max_size=8)), max_size=3).map(tuple)),
    st.builds(OffsetCommitRequestV1, group_ids, generations, member_ids, st.just(())),
)
names = st.text(max_size=12)
group_responses = st.one_of(
    st.tuples(st.just((8, 0)), st.builds(JoinGroupResponse, error_codes, int32s, names,
                                         st.lists(names, max_size=4).map(tuple))),
    st.tuples(st.just((9, 0)), st.builds(SyncGroupResponse, error_codes, st.lists(
        st.builds(StreamAssignment, names, int32s, st.lists(int32s, max_size=4).map(tuple)),
        max_size=4).map(tuple))),
    st.tuples(st.just((10, 0)), st.builds(HeartbeatResponse, error_codes)),
    st.tuples(st.just((11, 0)), st.builds(LeaveGroupResponse, error_codes)),
    st.tuples(st.just((6, 1)), st.builds(OffsetCommitResponse, st.lists(
        st.builds(OffsetCommitPartitionResult, names, int32s, error_codes), max_size=3).map(tuple))),
)


@NO_DEADLINE
@given(group_requests, int32s)
def test_every_group_request_round_trips(request_, correlation_id):
    header, decoded = decode_any_request(encode_request(request_, correlation_id, "c")[4:])
    assert decoded == request_ and header.correlation_id == correlation_id


@NO_DEADLINE
@given(requests)
def test_every_other_request_decodes_as_before(request_):
    frame = encode_request(request_, 3, "c")[4:]
    assert decode_any_request(frame) == decode_request(frame)


@NO_DEADLINE
@given(group_responses)
def test_every_group_response_round_trips(key_and_response):
    (api_key, version), response = key_and_response
    assert decode_group_response(api_key, version, encode_response(5, response)[4:]) == (5, response)


# -- bounds ----------------------------------------------------------------

JOIN_BOUNDS = [
    ("", 6000, 30000, "", (("t", 1),)),  # empty group
    ("g" * 256, 6000, 30000, "", (("t", 1),)),  # group too long
    ("g", 0, 30000, "", (("t", 1),)),  # session timeout not positive
    ("g", -5, 30000, "", (("t", 1),)),
    ("g", 6000, 0, "", (("t", 1),)),  # rebalance timeout not positive
    ("g", 6000, 30000, "m" * 256, (("t", 1),)),  # member id too long
    ("g", 6000, 30000, "", ()),  # no topic
    ("g", 6000, 30000, "", (("", 1),)),  # empty topic name
    ("g", 6000, 30000, "", (("t" * 250, 1),)),  # topic name too long
    ("g", 6000, 30000, "", (("t", 0),)),  # no stream
    ("g", 6000, 30000, "", (("t", MAX_STREAMS_PER_TOPIC + 1),)),  # too many streams
    ("g", 6000, 30000, "", (("t", 1), ("t", 2))),  # a topic twice
]


def join_body(group, session, rebalance, member, topics):
    return (string(group) + i32(session) + i32(rebalance) + string(member)
            + array(*[string(t) + i32(n) for t, n in topics]))


OTHER_BOUNDS = [
    (9, 0, string("") + i32(1) + string("m")),  # SYNC: empty group
    (9, 0, string("g") + i32(-1) + string("m")),  # SYNC: negative generation
    (9, 0, string("g") + i32(1) + string("")),  # SYNC: empty member
    (10, 0, string("g") + i32(-2) + string("m")),  # HEARTBEAT: negative generation
    (10, 0, string("g") + i32(1) + string("m" * 256)),  # HEARTBEAT: member too long
    (11, 0, string("g") + string("")),  # LEAVE: empty member
    (11, 0, string("g" * 300) + string("m")),  # LEAVE: group too long
    (6, 1, string("g") + i32(-1) + string("m") + array()),  # COMMIT v1: a member without generation
    (6, 1, string("g") + i32(3) + string("") + array()),  # COMMIT v1: a generation without member
    (6, 1, string("g") + i32(-7) + string("m") + array()),  # COMMIT v1: negative generation
    (6, 1, string("") + i32(-1) + string("") + array()),  # COMMIT v1: empty group
    (8, 0, string("g") + i32(1) + i32(1) + string(None) + array(string("t") + i32(1))),  # null member
]


@pytest.mark.parametrize("fields", JOIN_BOUNDS, ids=range(len(JOIN_BOUNDS)))
def test_join_values_out_of_bounds_are_invalid_requests(fields):
    with pytest.raises(ProtocolError) as info:
        decode_any_request(request_frame(8, 1, "c", join_body(*fields)))
    assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("api_key, version, body", OTHER_BOUNDS, ids=range(len(OTHER_BOUNDS)))
def test_other_values_out_of_bounds_are_invalid_requests(api_key, version, body):
    with pytest.raises(ProtocolError) as info:
        decode_any_request(request_frame(api_key, 1, "c", body, api_version=version))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_the_bounds_themselves_are_accepted():
    body = join_body("g" * 255, 1, 1, "m" * 255, (("t" * 249, MAX_STREAMS_PER_TOPIC),))
    _, request_ = decode_any_request(request_frame(8, 1, "c", body))
    assert request_.subscription() == {"t" * 249: MAX_STREAMS_PER_TOPIC}
    _, commit = decode_any_request(request_frame(6, 1, "c", string("g") + i32(-1) + string("")
                                                 + array(), api_version=1))
    assert commit == OffsetCommitRequestV1("g", -1, "", ())


def test_entries_per_request_bound_the_group_arrays_too():
    frame = request_frame(8, 1, "c", join_body("g", 1, 1, "", (("a", 1), ("b", 1), ("c", 1))))
    assert decode_any_request(frame, max_entries=3)[1].subscription() == {"a": 1, "b": 1, "c": 1}
    with pytest.raises(ProtocolError, match="over the limit") as info:
        decode_any_request(frame, max_entries=2)
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_error_codes_of_the_groups_are_appended():
    assert [(c.name, c.value) for c in ErrorCode if 16 <= c.value <= 21] == [
        ("UNKNOWN_MEMBER_ID", 16), ("ILLEGAL_GENERATION", 17), ("REBALANCE_IN_PROGRESS", 18),
        ("INVALID_SESSION_TIMEOUT", 19), ("GROUP_TOO_LARGE", 20), ("TOO_MANY_GROUPS", 21)]
