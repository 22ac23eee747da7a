"""Codecs of replicas across log dirs (docs/spec/protocol.md, "Replicas across log
dirs"): exact bytes from the spec, round trips, every bound refused at decode,
the routing through replication.decode_any_request, and any bytes decoding or
raising ProtocolError, nothing else."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.client import connection
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api, groups
from hostbroker.protocol import logdirs as ld
from hostbroker.protocol import replication as rp
from hostbroker.protocol.api import AdminResponse, MetadataBroker, TopicConfigEntry

from tests.protocol.strategies import NO_DEADLINE, error_codes, int32s, int64s, nullable_names
from tests.protocol.test_fuzz import mutated
from tests.protocol.wire import array, i16, i32, i64, request_frame, string

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def i8(value):
    return value.to_bytes(1, "big", signed=True)


def ids(*values):
    return array(*map(i32, values))


# (request, api_key, api_version, body written from docs/spec/protocol.md)
REQUEST_BODIES = [
    (ld.MetadataRequestV2(("t", "u")), 3, 2, array(string("t"), string("u"))),
    (ld.CreateTopicRequestV1("t", 3, (TopicConfigEntry("min.insync.replicas", "2"),), 2), 4, 1,
     string("t") + i32(3) + array(string("min.insync.replicas") + string("2")) + i16(2)),
    (ld.CreateTopicRequestV1("t", 1), 4, 1, string("t") + i32(1) + array() + i16(-1)),
    (ld.AlterReplicaDirsRequest((ld.AlterReplicaDirsPartition("t", 0, (3, 1)),
                                 ld.AlterReplicaDirsPartition("u", 2, (7,)))), 17, 0,
     array(string("t") + i32(0) + ids(3, 1), string("u") + i32(2) + ids(7))),
    (ld.LogDirAdminRequest(ld.ACTION_ONLINE, "/srv/d2", -1), 18, 0,
     i8(0) + string("/srv/d2") + i32(-1)),
    (ld.LogDirAdminRequest(ld.ACTION_FORGET, None, 3), 18, 0, i8(1) + string(None) + i32(3)),
]

METADATA_V2 = ld.MetadataResponseV2(
    0, -1, (MetadataBroker(0, "127.0.0.1", 9092, None),),
    (ld.MetadataTopicV2("t", ErrorCode.NONE, (
        ld.MetadataPartitionV2(0, ErrorCode.NONE, 0, 3, (0,), (0,), 0, 4096, "/d3",
                               3, (3, 1), (3,), ()),
        ld.MetadataPartitionV2(1, ErrorCode.LEADER_NOT_AVAILABLE, -1, 2, (0,), (0,), 0, 0,
                               None, -1, (1, 2), (2,), (2, 3)),)),),
    (ld.MetadataLogDir(1, "/d1", ld.DIR_ONLINE), ld.MetadataLogDir(2, "/d2", ld.DIR_OFFLINE),
     ld.MetadataLogDir(9, None, ld.DIR_MISSING)),
)

RESPONSE_BODIES = [
    (METADATA_V2,
     i32(0) + i32(-1) + array(i32(0) + string("127.0.0.1") + i32(9092) + string(None))
     + array(string("t") + i16(0) + array(
         i32(0) + i16(0) + i32(0) + i32(3) + ids(0) + ids(0) + i64(0) + i64(4096)
         + string("/d3") + i32(3) + ids(3, 1) + ids(3) + ids(),
         i32(1) + i16(27) + i32(-1) + i32(2) + ids(0) + ids(0) + i64(0) + i64(0)
         + string(None) + i32(-1) + ids(1, 2) + ids(2) + ids(2, 3)))
     + array(i32(1) + string("/d1") + i8(0), i32(2) + string("/d2") + i8(1),
             i32(9) + string(None) + i8(2))),
    (ld.AlterReplicaDirsResponse(ErrorCode.NONE, None, (
        ld.PartitionError("t", 0, ErrorCode.NONE),
        ld.PartitionError("t", 1, ErrorCode.LOG_DIR_NOT_FOUND))),
     i16(0) + string(None) + array(string("t") + i32(0) + i16(0),
                                   string("t") + i32(1) + i16(31))),
    (ld.AlterReplicaDirsResponse(ErrorCode.INVALID_REQUEST, "a reassignment is in progress", ()),
     i16(7) + string("a reassignment is in progress") + array()),
    (AdminResponse(ErrorCode.INVALID_REPLICATION_FACTOR,
                   "replication factor 3 needs 3 usable log dirs; the broker has 2 (1 offline)"),
     i16(30) + string("replication factor 3 needs 3 usable log dirs; the broker has 2 "
                      "(1 offline)")),
]


def test_the_new_error_codes_and_api_keys():
    assert (ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.LOG_DIR_NOT_FOUND) == (30, 31)
    assert (api.ApiKey.ALTER_REPLICA_DIRS, api.ApiKey.LOG_DIR_ADMIN) == (17, 18)
    assert set(ld.LOGDIRS_REQUEST_TYPES) == {(3, 2), (4, 1), (17, 0), (18, 0)}
    assert set(ld.LOGDIRS_RESPONSE_TYPES) == set(ld.LOGDIRS_REQUEST_TYPES)
    assert not set(ld.LOGDIRS_REQUEST_TYPES) & set(rp.REPLICATION_REQUEST_TYPES)


@pytest.mark.parametrize("request_, key, version, body", REQUEST_BODIES,
                         ids=[f"{type(case[0]).__name__}-{i}"
                              for i, case in enumerate(REQUEST_BODIES)])
def test_request_bytes_are_the_spec(request_, key, version, body):
    frame = api.encode_request(request_, 77, "c")
    assert frame[4:] == request_frame(key, 77, "c", body, api_version=version)
    assert rp.request_version(frame[4:]) == (key, version)
    for decode in (ld.decode_request, rp.decode_any_request):
        header, decoded = decode(frame[4:])
        assert (header.api_key, header.api_version, header.correlation_id) == (key, version, 77)
        assert decoded == request_
    with pytest.raises(ProtocolError, match="left over"):
        ld.decode_request(frame[4:] + b"\x00")
    for end in range(len(frame) - 4):  # every truncation, as one byte at a time would see it
        with pytest.raises(ProtocolError) as info:
            rp.decode_any_request(frame[4:4 + end])
        assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("response, body", RESPONSE_BODIES,
                         ids=[f"{type(case[0]).__name__}-{i}"
                              for i, case in enumerate(RESPONSE_BODIES)])
def test_response_bytes_are_the_spec(response, body):
    frame = api.encode_response(-3, response)
    assert frame[4:] == i32(-3) + body
    for decode in (ld.decode_response, rp.decode_response):
        assert decode(frame[4:], type(response)) == (-3, response)
    with pytest.raises(ProtocolError):
        ld.decode_response(frame[4:] + b"\x00", type(response))
    for end in range(len(frame) - 4):
        with pytest.raises(ProtocolError):
            ld.decode_response(frame[4:4 + end], type(response))


@pytest.mark.parametrize("request_, _key, _version, _body", REQUEST_BODIES,
                         ids=[f"{type(case[0]).__name__}-{i}"
                              for i, case in enumerate(REQUEST_BODIES)])
def test_older_decoders_answer_them_unsupported(request_, _key, _version, _body):
    """Version 0's decoder, the group APIs' and replication's own decode_request
    do not know them: only replication.decode_any_request routes them here."""
    frame = api.encode_request(request_, 1)[4:]
    for decode in (api.decode_request, groups.decode_any_request, rp.decode_request):
        with pytest.raises(ProtocolError) as info:
            decode(frame)
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("key, version", [(3, 3), (3, 1), (4, 0), (4, 2), (17, 1), (18, 1),
                                          (19, 0), (14, 0)])
def test_other_keys_and_versions_are_unsupported_here(key, version):
    with pytest.raises(ProtocolError) as info:
        ld.decode_request(request_frame(key, 1, "c", array(), api_version=version))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_version_0_and_1_bodies_still_decode_as_before():
    for request_ in (api.MetadataRequest(("t",)), api.CreateTopicRequest("t", 2)):
        frame = api.encode_request(request_, 3, "c")[4:]
        assert rp.decode_any_request(frame) == api.decode_request(frame)
    frame = rp.encode_request(rp.MetadataRequestV1(("t",)), 3, "c")[4:]
    assert rp.decode_any_request(frame)[1] == rp.MetadataRequestV1(("t",))


def test_a_metadata_request_goes_out_as_version_2_and_back():
    frame = rp.encode_request(api.MetadataRequest(("t",)), 5, "c", version=2)
    assert rp.decode_any_request(frame[4:])[1] == ld.MetadataRequestV2(("t",))
    assert rp.encode_request(ld.MetadataRequestV2(("t",)), 5, "c", version=0) == \
        api.encode_request(api.MetadataRequest(("t",)), 5, "c")
    with pytest.raises(ValueError):  # the bodies differ: a replication factor follows
        rp.encode_request(api.CreateTopicRequest("t", 1), 5, "c", version=1)
    with pytest.raises(ValueError):
        ld.decode_response(b"\x00" * 8, api.FetchResponse)


def test_the_client_connection_knows_the_answers():
    """BrokerConnection.request decodes each of these answers as its own type."""
    for (key, version), cls in ld.LOGDIRS_REQUEST_TYPES.items():
        assert cls in connection._REPLICATION_REQUESTS
        assert connection._REPLICATION_RESPONSES[(key, version)] is \
            ld.LOGDIRS_RESPONSE_TYPES[(key, version)]


# -- bounds ------------------------------------------------------------------

def alter(*parts):
    return array(*(string(t) + i32(p) + ids(*dirs) for t, p, dirs in parts))


BAD_REQUESTS = [
    ("replication factor 0", 4, 1, string("t") + i32(1) + array() + i16(0)),
    ("replication factor 9", 4, 1, string("t") + i32(1) + array() + i16(9)),
    ("replication factor -2", 4, 1, string("t") + i32(1) + array() + i16(-2)),
    ("nine dirs", 17, 0, alter(("t", 0, tuple(range(1, 10))))),
    ("no dirs", 17, 0, alter(("t", 0, ()))),
    ("a dir twice", 17, 0, alter(("t", 0, (2, 2)))),
    ("dir id 0", 17, 0, alter(("t", 0, (0,)))),
    ("dir id -1", 17, 0, alter(("t", 0, (-1,)))),
    ("partition twice", 17, 0, alter(("t", 0, (1,)), ("t", 0, (2,)))),
    ("negative partition", 17, 0, alter(("t", -1, (1,)))),
    ("empty topic", 17, 0, alter(("", 0, (1,)))),
    ("huge dir count", 17, 0, array(string("t") + i32(0) + i32(2**31 - 1))),
    ("action 2", 18, 0, i8(2) + string("/d") + i32(-1)),
    ("action -1", 18, 0, i8(-1) + string("/d") + i32(-1)),
    ("online without a path", 18, 0, i8(0) + string(None) + i32(-1)),
    ("online with an empty path", 18, 0, i8(0) + string("") + i32(-1)),
    ("online with a NUL", 18, 0, i8(0) + string("/d\0x") + i32(-1)),
    ("online with an id", 18, 0, i8(0) + string("/d") + i32(3)),
    ("forget id 0", 18, 0, i8(1) + string(None) + i32(0)),
    ("forget id -1", 18, 0, i8(1) + string(None) + i32(-1)),
    ("forget with a path", 18, 0, i8(1) + string("/d") + i32(3)),
]


@pytest.mark.parametrize("what, key, version, body", BAD_REQUESTS,
                         ids=[case[0] for case in BAD_REQUESTS])
def test_values_out_of_bounds_are_invalid_requests(what, key, version, body):
    frame = request_frame(key, 9, "c", body, api_version=version)
    for decode in (ld.decode_request, rp.decode_any_request):
        with pytest.raises(ProtocolError) as info:
            decode(frame)
        assert info.value.code == ErrorCode.INVALID_REQUEST


def metadata_v2(partition=None, log_dirs=()):
    partition = partition or ld.MetadataPartitionV2(0, 0, 0, 1, (0,), (0,), 0, 0, "/d1",
                                                    1, (1, 2), (1,), ())
    return ld.MetadataResponseV2(0, -1, (), (ld.MetadataTopicV2("t", 0, (partition,)),),
                                 tuple(log_dirs))


def partition_v2(leader_dir=1, replica_dirs=(1, 2), isr_dirs=(1,), target_dirs=()):
    return ld.MetadataPartitionV2(0, 0, 0, 1, (0,), (0,), 0, 0, "/d1",
                                  leader_dir, replica_dirs, isr_dirs, target_dirs)


BAD_ANSWERS = [
    ("ISR dir outside the replicas", metadata_v2(partition_v2(isr_dirs=(3,)))),
    ("replica dir twice", metadata_v2(partition_v2(replica_dirs=(1, 1)))),
    ("ISR dir twice", metadata_v2(partition_v2(isr_dirs=(1, 1)))),
    ("target dir twice", metadata_v2(partition_v2(target_dirs=(3, 3)))),
    ("leader dir outside", metadata_v2(partition_v2(leader_dir=3))),
    ("log dir twice", metadata_v2(log_dirs=[ld.MetadataLogDir(1, "/a", 0),
                                            ld.MetadataLogDir(1, "/b", 0)])),
    ("log dir state 3", metadata_v2(log_dirs=[ld.MetadataLogDir(1, "/a", 3)])),
    ("log dir id 0", metadata_v2(log_dirs=[ld.MetadataLogDir(0, "/a", 0)])),
    ("online dir without a path", metadata_v2(log_dirs=[ld.MetadataLogDir(1, None, 0)])),
]


@pytest.mark.parametrize("what, answer", BAD_ANSWERS, ids=[case[0] for case in BAD_ANSWERS])
def test_a_metadata_v2_answer_that_does_not_agree_is_refused(what, answer):
    frame = api.encode_response(1, answer)[4:]
    with pytest.raises(ProtocolError):
        ld.decode_response(frame, ld.MetadataResponseV2)


def test_more_than_max_replicas_cannot_be_encoded():
    with pytest.raises(ValueError):
        api.encode_request(ld.AlterReplicaDirsRequest(
            (ld.AlterReplicaDirsPartition("t", 0, tuple(range(1, 10))),)), 1)


def test_max_entries_bounds_the_arrays():
    request_ = ld.AlterReplicaDirsRequest(tuple(
        ld.AlterReplicaDirsPartition("t", p, (1,)) for p in range(5)))
    frame = api.encode_request(request_, 1, "c")[4:]
    assert rp.decode_any_request(frame, max_entries=10)[1] == request_
    with pytest.raises(ProtocolError):
        rp.decode_any_request(frame, max_entries=4)


# -- round trips -------------------------------------------------------------

dir_ids = st.integers(1, 2**31 - 1)
dir_lists = st.lists(dir_ids, max_size=8, unique=True).map(tuple)
names = st.text(min_size=1, max_size=12)


@st.composite
def partitions_v2(draw):
    replica_dirs = draw(dir_lists)
    isr_dirs = tuple(d for d in replica_dirs if draw(st.booleans()))
    leader_dir = draw(st.sampled_from((-1, *replica_dirs)))
    replicas = draw(st.lists(st.integers(0, 2**31 - 1), max_size=8, unique=True).map(tuple))
    return ld.MetadataPartitionV2(
        draw(int32s), draw(error_codes), draw(int32s), draw(int32s), replicas,
        tuple(r for r in replicas if draw(st.booleans())), draw(int64s), draw(int64s),
        draw(nullable_names), leader_dir, replica_dirs, isr_dirs, draw(dir_lists))


@st.composite
def log_dir_lists(draw):
    chosen = draw(st.lists(dir_ids, max_size=4, unique=True))
    out = []
    for d in chosen:
        state = draw(st.sampled_from((ld.DIR_ONLINE, ld.DIR_OFFLINE, ld.DIR_MISSING)))
        path = draw(st.none() if state == ld.DIR_MISSING and draw(st.booleans()) else names)
        out.append(ld.MetadataLogDir(d, path, state))
    return tuple(out)


metadata_v2_answers = st.builds(
    ld.MetadataResponseV2, int32s, int32s,
    st.lists(st.builds(MetadataBroker, int32s, nullable_names, int32s, nullable_names),
             max_size=2).map(tuple),
    st.lists(st.builds(ld.MetadataTopicV2, names, error_codes,
                       st.lists(partitions_v2(), max_size=3).map(tuple)),
             max_size=3).map(tuple),
    log_dir_lists())


@st.composite
def alter_requests(draw):
    parts = draw(st.lists(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=4,
                          unique=True))
    return ld.AlterReplicaDirsRequest(tuple(
        ld.AlterReplicaDirsPartition(t, p, draw(st.lists(dir_ids, min_size=1, max_size=8,
                                                         unique=True).map(tuple)))
        for t, p in parts))


logdirs_requests = st.one_of(
    st.builds(ld.MetadataRequestV2, st.lists(names, max_size=3).map(tuple)),
    st.builds(ld.CreateTopicRequestV1, names, int32s,
              st.lists(st.builds(TopicConfigEntry, names, names), max_size=2).map(tuple),
              st.sampled_from((-1, *range(1, 9)))),
    alter_requests(),
    st.builds(ld.LogDirAdminRequest, st.just(ld.ACTION_ONLINE),
              names.filter(lambda s: "\0" not in s), st.just(-1)),
    st.builds(ld.LogDirAdminRequest, st.just(ld.ACTION_FORGET), st.sampled_from((None, "")),
              dir_ids),
)

logdirs_responses = st.one_of(
    metadata_v2_answers,
    st.builds(ld.AlterReplicaDirsResponse, error_codes, nullable_names,
              st.lists(st.builds(ld.PartitionError, names, int32s, error_codes),
                       max_size=3).map(tuple)),
    st.builds(AdminResponse, error_codes, nullable_names),
)


@NO_DEADLINE
@given(logdirs_requests, int32s)
def test_every_request_round_trips(request_, correlation_id):
    frame = api.encode_request(request_, correlation_id, "c")[4:]
    header, decoded = rp.decode_any_request(frame)
    assert (decoded, header.correlation_id) == (request_, correlation_id)


@NO_DEADLINE
@given(logdirs_responses, int32s)
def test_every_response_round_trips(response, correlation_id):
    frame = api.encode_response(correlation_id, response)[4:]
    assert ld.decode_response(frame, type(response)) == (correlation_id, response)


# -- fuzz: decode or ProtocolError, nothing else ---------------------------------

def survives(decode, frame):
    try:
        decode(frame)
    except ProtocolError:
        pass


@FUZZ
@given(st.sampled_from(sorted(ld.LOGDIRS_REQUEST_TYPES)).flatmap(
    lambda kv: st.binary(max_size=160).map(
        lambda body: request_frame(kv[0], 1, "f", b"", api_version=kv[1]) + body)))
def test_random_bodies_behind_a_logdirs_header(frame):
    survives(ld.decode_request, frame)
    survives(rp.decode_any_request, frame)


@FUZZ
@given(mutated(st.builds(lambda r: api.encode_request(r, 5, "f")[4:], logdirs_requests)))
def test_mutated_logdirs_requests(frame):
    survives(ld.decode_request, frame)
    survives(rp.decode_any_request, frame)


@FUZZ
@given(st.sampled_from(sorted(set(ld.LOGDIRS_RESPONSE_TYPES.values()), key=str)),
       st.binary(max_size=200))
def test_random_bytes_as_a_logdirs_response(cls, frame):
    survives(lambda f: ld.decode_response(f, cls), frame)


@FUZZ
@given(mutated(st.builds(lambda r: api.encode_response(5, r)[4:], logdirs_responses)))
def test_mutated_logdirs_responses(frame):
    for cls in set(ld.LOGDIRS_RESPONSE_TYPES.values()):
        survives(lambda f: ld.decode_response(f, cls), frame)
