"""Codecs of changing topics (docs/spec/protocol.md, "Changing topics"):
ALTER_TOPIC (19), LIST_OFFSET_GROUPS (20), DESCRIBE_TOPIC_CONFIGS (21): exact bytes from the spec,
round trips, the routing through replication.decode_any_request, the one
bound the codec checks, and any bytes decoding or raising ProtocolError."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.client import connection
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api, groups
from hostbroker.protocol import replication as rp
from hostbroker.protocol import topics_admin as ta
from hostbroker.protocol.api import AdminResponse, TopicConfigEntry

from tests.protocol.test_fuzz import mutated
from tests.protocol.wire import array, i16, i32, request_frame, string

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def i8(value):
    return value.to_bytes(1, "big", signed=True)


REQUEST_BODIES = [
    (ta.AlterTopicRequest("t", 6, (TopicConfigEntry("retention.bytes", "1024"),),
                          ("flush.ms",), 0), 19, 0,
     string("t") + i32(6) + array(string("retention.bytes") + string("1024"))
     + array(string("flush.ms")) + i8(0)),
    (ta.AlterTopicRequest("t", validate_only=1, delete_configs=("a", "b")), 19, 0,
     string("t") + i32(-1) + array() + array(string("a"), string("b")) + i8(1)),
    (ta.ListOffsetGroupsRequest(), 20, 0, array()),
    (ta.ListOffsetGroupsRequest(("g", "h")), 20, 0, array(string("g"), string("h"))),
    (ta.DescribeTopicConfigsRequest(("t", "u")), 21, 0, array(string("t"), string("u"))),
    (ta.DescribeTopicConfigsRequest(), 21, 0, array()),
]

RESPONSE_BODIES = [
    (AdminResponse(ErrorCode.INVALID_PARTITIONS, "topic t has 4 partitions; they only grow"),
     i16(32) + string("topic t has 4 partitions; they only grow")),
    (AdminResponse(ErrorCode.NONE, None), i16(0) + string(None)),
    (ta.ListOffsetGroupsResponse(ErrorCode.NONE, (ta.OffsetGroup("a", ("t", "u")),
                                                  ta.OffsetGroup("b"))),
     i16(0) + array(string("a") + array(string("t"), string("u")), string("b") + array())
     + i8(0)),
    (ta.ListOffsetGroupsResponse(ErrorCode.BROKER_NOT_AVAILABLE), i16(13) + array() + i8(0)),
    (ta.ListOffsetGroupsResponse(ErrorCode.NONE, (ta.OffsetGroup("a", ("t",)),), 1),
     i16(0) + array(string("a") + array(string("t"))) + i8(1)),
    (ta.DescribeTopicConfigsResponse((
        ta.TopicConfigs("t", ErrorCode.NONE, (TopicConfigEntry("retention.ms", "60000"),)),
        ta.TopicConfigs("u", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))),
     array(string("t") + i16(0) + array(string("retention.ms") + string("60000")),
           string("u") + i16(3) + array())),
]


def test_the_new_codes_and_keys():
    assert ErrorCode.INVALID_PARTITIONS == 32
    assert (api.ApiKey.ALTER_TOPIC, api.ApiKey.LIST_OFFSET_GROUPS,
            api.ApiKey.DESCRIBE_TOPIC_CONFIGS) == (19, 20, 21)
    assert set(ta.TOPICS_ADMIN_REQUEST_TYPES) == {(19, 0), (20, 0), (21, 0)}
    assert set(ta.TOPICS_ADMIN_RESPONSE_TYPES) == set(ta.TOPICS_ADMIN_REQUEST_TYPES)
    assert not set(ta.TOPICS_ADMIN_REQUEST_TYPES) & set(rp.REPLICATION_REQUEST_TYPES)


@pytest.mark.parametrize("request_, key, version, body", REQUEST_BODIES,
                         ids=[f"{type(case[0]).__name__}-{i}"
                              for i, case in enumerate(REQUEST_BODIES)])
def test_request_bytes_are_the_spec(request_, key, version, body):
    frame = api.encode_request(request_, 77, "c")
    assert frame[4:] == request_frame(key, 77, "c", body, api_version=version)
    for decode in (ta.decode_request, rp.decode_any_request):
        header, decoded = decode(frame[4:])
        assert (header.api_key, header.api_version, header.correlation_id) == (key, version, 77)
        assert decoded == request_
    with pytest.raises(ProtocolError, match="left over"):
        rp.decode_any_request(frame[4:] + b"\x00")
    for end in range(len(frame) - 4):
        with pytest.raises(ProtocolError) as info:
            rp.decode_any_request(frame[4:4 + end])
        assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("response, body", RESPONSE_BODIES,
                         ids=[f"{type(case[0]).__name__}-{i}"
                              for i, case in enumerate(RESPONSE_BODIES)])
def test_response_bytes_are_the_spec(response, body):
    frame = api.encode_response(-3, response)
    assert frame[4:] == i32(-3) + body
    cls = type(response)
    for decode in (ta.decode_response, rp.decode_response):
        assert decode(frame[4:], cls) == (-3, response)
    for end in range(len(frame) - 4):
        with pytest.raises(ProtocolError):
            ta.decode_response(frame[4:4 + end], cls)


@pytest.mark.parametrize("request_, _key, _version, _body", REQUEST_BODIES)
def test_older_decoders_answer_them_unsupported(request_, _key, _version, _body):
    frame = api.encode_request(request_, 1)[4:]
    for decode in (api.decode_request, groups.decode_any_request, rp.decode_request):
        with pytest.raises(ProtocolError) as info:
            decode(frame)
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("key, version", [(19, 1), (20, 1), (21, 1), (22, 0), (18, 0)])
def test_other_keys_and_versions_are_unsupported_here(key, version):
    with pytest.raises(ProtocolError) as info:
        ta.decode_request(request_frame(key, 1, "c", b"", api_version=version))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("flag", [2, -1, 127])
def test_validate_only_is_0_or_1(flag):
    body = string("t") + i32(-1) + array() + array() + i8(flag)
    with pytest.raises(ProtocolError) as info:
        rp.decode_any_request(request_frame(19, 1, "c", body))
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_a_request_that_changes_nothing_decodes_and_says_so():
    """(The broker answers it INVALID_REQUEST with a message, not the codec.)"""
    body = string("t") + i32(-1) + array() + array() + i8(0)
    request = rp.decode_any_request(request_frame(19, 1, "c", body))[1]
    assert request.changes_nothing()
    assert not ta.AlterTopicRequest("t", 2).changes_nothing()
    assert not ta.AlterTopicRequest("t", delete_configs=("flush.ms",)).changes_nothing()


def test_an_answer_names_a_group_s_topics():
    answer = ta.ListOffsetGroupsResponse(ErrorCode.NONE, (ta.OffsetGroup("a", ("t", "u")),
                                                          ta.OffsetGroup("b", ("v",))))
    assert answer.topics_of("a") == ("t", "u")
    assert answer.topics_of("b") == ("v",)
    assert answer.topics_of("c") == ()


def test_the_client_connection_knows_the_answers():
    for (key, version), cls in ta.TOPICS_ADMIN_REQUEST_TYPES.items():
        assert cls in connection._REPLICATION_REQUESTS
        assert connection._REPLICATION_RESPONSES[(key, version)] is \
            ta.TOPICS_ADMIN_RESPONSE_TYPES[(key, version)]


@FUZZ
@given(mutated(st.sampled_from([api.encode_request(case[0], 5, "c")[4:]
                                for case in REQUEST_BODIES])))
def test_any_bytes_decode_or_raise_protocol_error(frame):
    try:
        rp.decode_any_request(frame)
    except ProtocolError:
        pass
