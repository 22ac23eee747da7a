"""Codecs of access control (docs/spec/protocol.md, "Access control"): exact bytes,
round trips, enum ranges refused at decode, every truncation refused, and any
mutation decoding or raising ProtocolError, nothing else."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import acls, api

from tests.protocol.test_fuzz import mutated, survives
from tests.protocol.wire import array, i16, i32, i64, request_frame, string

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def i8(value):
    return value.to_bytes(1, "big", signed=True)


READ_ORDERS = acls.AclEntry(2, "orders", 3, "User:alice", "*", 3, 3)
READ_ORDERS_BYTES = (i8(2) + string("orders") + i8(3) + string("User:alice") + string("*")
                     + i8(3) + i8(3))
ANY_FILTER_BYTES = i8(1) + string(None) + i8(1) + string(None) + string(None) + i8(1) + i8(1)

REQUEST_BODIES = [
    (acls.CreateAclsRequest((READ_ORDERS,)), 22, array(READ_ORDERS_BYTES)),
    (acls.DeleteAclsRequest((acls.AclFilterEntry(),
                             acls.AclFilterEntry(2, "ord", 4, "User:bob", None, 4, 2))), 23,
     array(ANY_FILTER_BYTES, i8(2) + string("ord") + i8(4) + string("User:bob") + string(None)
           + i8(4) + i8(2))),
    (acls.DescribeAclsRequest(), 24, ANY_FILTER_BYTES),
    (acls.AlterQuotasRequest((acls.QuotaEntity("User:alice", (
        acls.QuotaValue("producer_byte_rate", 1 << 20),
        acls.QuotaValue("request_rate", acls.REMOVE))),)), 25,
     array(string("User:alice") + array(string("producer_byte_rate") + i64(1 << 20),
                                        string("request_rate") + i64(-1)))),
    (acls.DescribeQuotasRequest(("<default>",)), 26, array(string("<default>"))),
    (acls.WhoamiRequest(), 27, b""),
]

RESPONSE_BODIES = [
    (acls.CreateAclsResponse((acls.EntryResult(ErrorCode.NONE),
                              acls.EntryResult(ErrorCode.INVALID_REQUEST, "no Write on a Group"))),
     array(i16(0) + string(None), i16(7) + string("no Write on a Group"))),
    (acls.DeleteAclsResponse((acls.DeleteAclsFilterResult(ErrorCode.NONE, None,
                                                          (READ_ORDERS,)),)),
     array(i16(0) + string(None) + array(READ_ORDERS_BYTES))),
    (acls.DescribeAclsResponse(ErrorCode.NONE, None, (READ_ORDERS,), 1),
     i16(0) + string(None) + array(READ_ORDERS_BYTES) + i8(1)),
    (acls.AlterQuotasResponse((acls.EntryResult(ErrorCode.NONE),)), array(i16(0) + string(None))),
    (acls.DescribeQuotasResponse(ErrorCode.NONE, (acls.QuotaEntity(
        "<default>", (acls.QuotaValue("request_rate", 100),)),)),
     i16(0) + array(string("<default>") + array(string("request_rate") + i64(100))) + i8(0)),
    (acls.WhoamiResponse("User:root", ("Group:root",), "localhost", 1),
     string("User:root") + array(string("Group:root")) + string("localhost") + i8(1)),
]


@pytest.mark.parametrize("request_, key, body", REQUEST_BODIES,
                         ids=[type(case[0]).__name__ for case in REQUEST_BODIES])
def test_request_bytes_round_trip_and_truncations_are_refused(request_, key, body):
    frame = api.encode_request(request_, 77, "c")
    assert frame[4:] == request_frame(key, 77, "c", body, api_version=0)
    header, decoded = acls.decode_request(frame[4:])
    assert (header.api_key, header.correlation_id, decoded) == (key, 77, request_)
    with pytest.raises(ProtocolError, match="left over"):
        acls.decode_request(frame[4:] + b"\x00")
    for end in range(len(frame) - 4):
        with pytest.raises(ProtocolError) as info:
            acls.decode_request(frame[4:4 + end])
        assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("response, body", RESPONSE_BODIES,
                         ids=[type(case[0]).__name__ for case in RESPONSE_BODIES])
def test_response_bytes_round_trip(response, body):
    frame = api.encode_response(-3, response)
    assert frame[4:] == i32(-3) + body
    assert acls.decode_response(frame[4:], type(response)) == (-3, response)
    for end in range(len(frame) - 4):
        with pytest.raises(ProtocolError):
            acls.decode_response(frame[4:4 + end], type(response))


@pytest.mark.parametrize("entry", [
    acls.AclEntry(1, "t", 3, "User:a", "*", 3, 3),  # any is for filters
    acls.AclEntry(5, "t", 3, "User:a", "*", 3, 3),
    acls.AclEntry(2, "t", 2, "User:a", "*", 3, 3),  # match is for filters
    acls.AclEntry(2, "t", 3, "User:a", "*", 1, 3),
    acls.AclEntry(2, "t", 3, "User:a", "*", 10, 3),
    acls.AclEntry(2, "t", 3, "User:a", "*", 3, 1),
    acls.AclEntry(2, "t", 3, "User:a", "*", 3, 4),
])
def test_a_binding_with_an_enum_out_of_range_is_an_invalid_request(entry):
    frame = api.encode_request(acls.CreateAclsRequest((entry,)), 1)[4:]
    with pytest.raises(ProtocolError) as info:
        acls.decode_request(frame)
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_filter_enums_take_any_and_refuse_past_the_range():
    acls.decode_request(api.encode_request(acls.DescribeAclsRequest(
        acls.AclFilterEntry(1, None, 2, None, None, 1, 1)), 1)[4:])
    for bad in (acls.AclFilterEntry(resource_type=0), acls.AclFilterEntry(pattern_type=5),
                acls.AclFilterEntry(operation=0), acls.AclFilterEntry(permission_type=4)):
        with pytest.raises(ProtocolError):
            acls.decode_request(api.encode_request(acls.DescribeAclsRequest(bad), 1)[4:])


def test_other_keys_are_unsupported_here():
    with pytest.raises(ProtocolError) as info:
        acls.decode_request(request_frame(21, 1, "c", array(), api_version=0))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@FUZZ
@given(mutated(st.sampled_from([bytes(api.encode_request(r, 5, "c")[4:])
                                for r, _, _ in REQUEST_BODIES])))
def test_mutated_requests_decode_or_are_protocol_errors(frame):
    survives(acls.decode_request, frame)
