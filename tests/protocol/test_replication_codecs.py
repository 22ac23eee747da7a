"""Replication codecs (docs/spec/protocol.md, "Replication"): exact bytes from the
spec, round trips, every bound refused at decode, the sendfile form of FETCH v1,
and any bytes decoding or raising ProtocolError, nothing else."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api, groups
from hostbroker.protocol import replication as rp
from hostbroker.protocol.api import MetadataBroker, TopicConfigEntry

from tests.protocol.strategies import NO_DEADLINE, error_codes, int32s, int64s, requests
from tests.protocol.test_fuzz import mutated
from tests.protocol.wire import array, data, i16, i32, i64, request_frame, string

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def i8(value):
    return value.to_bytes(1, "big", signed=True)


LAI = rp.LeaderAndIsrRequest(
    1, 7,
    (rp.LeaderAndIsrPartition("t", 0, 2, 5, (2, 3), 11, (2, 3, 4)),
     rp.LeaderAndIsrPartition("t", 1, -1, 6, (), 12, (3,))),
    (rp.TopicConfigs("t", (TopicConfigEntry("min.insync.replicas", "2"),)),),
    (rp.BrokerEndpoint(2, "127.0.0.1", 9092, "/run/b2.sock"), MetadataBroker(3, None, 0, "/s")),
)

# (request, api_key, api_version, body written from docs/spec/protocol.md)
REQUEST_BODIES = [
    (rp.MetadataRequestV1(("t", "u")), 3, 1, array(string("t"), string("u"))),
    (rp.FetchRequestV1(4, 500, 1, (rp.FetchPartitionV1("t", 2, 9, 1000, 65536),)), 1, 1,
     i32(4) + i32(500) + i32(1) + array(string("t") + i32(2) + i32(9) + i64(1000) + i32(65536))),
    (rp.FetchRequestV1(-1, 0, 0, (rp.FetchPartitionV1("t", 0, -1, 0, 10),)), 1, 1,
     i32(-1) + i32(0) + i32(0) + array(string("t") + i32(0) + i32(-1) + i64(0) + i32(10))),
    (LAI, 14, 0,
     i32(1) + i32(7)
     + array(string("t") + i32(0) + i32(2) + i32(5) + array(i32(2), i32(3)) + i32(11)
             + array(i32(2), i32(3), i32(4)),
             string("t") + i32(1) + i32(-1) + i32(6) + array() + i32(12) + array(i32(3)))
     + array(string("t") + array(string("min.insync.replicas") + string("2")))
     + array(i32(2) + string("127.0.0.1") + i32(9092) + string("/run/b2.sock"),
             i32(3) + string(None) + i32(0) + string("/s"))),
    (rp.StopReplicaRequest(1, 7, 1, (rp.StopReplicaPartition("t", 0),)), 15, 0,
     i32(1) + i32(7) + i8(1) + array(string("t") + i32(0))),
    (rp.OffsetForLeaderEpochRequest(3, (rp.OffsetForLeaderEpochPartition("t", 1, 4),)), 16, 0,
     i32(3) + array(string("t") + i32(1) + i32(4))),
]

RESPONSE_BODIES = [
    (rp.MetadataResponseV1(
        1, 2, (MetadataBroker(1, "h", 9092, None),),
        (rp.MetadataTopicV1("t", ErrorCode.NONE, (rp.MetadataPartitionV1(
            0, ErrorCode.NONE, 1, 3, (1, 2), (1,), 0, 4096, "/d1"),)),
         rp.MetadataTopicV1("x", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))),
     i32(1) + i32(2) + array(i32(1) + string("h") + i32(9092) + string(None))
     + array(string("t") + i16(0) + array(i32(0) + i16(0) + i32(1) + i32(3)
                                          + array(i32(1), i32(2)) + array(i32(1))
                                          + i64(0) + i64(4096) + string("/d1")),
             string("x") + i16(3) + array())),
    (rp.FetchResponseV1((rp.FetchPartitionResultV1("t", 0, ErrorCode.NONE, 90, 100, 3, b"abc"),
                         rp.FetchPartitionResultV1("t", 1, ErrorCode.FENCED_LEADER_EPOCH,
                                                   -1, -1, -1, b""))),
     array(string("t") + i32(0) + i16(0) + i64(90) + i64(100) + i32(3) + data(b"abc"),
           string("t") + i32(1) + i16(26) + i64(-1) + i64(-1) + i32(-1) + data(b""))),
    (rp.LeaderAndIsrResponse(ErrorCode.NONE, (rp.PartitionError("t", 0, ErrorCode.NONE),)),
     i16(0) + array(string("t") + i32(0) + i16(0))),
    (rp.LeaderAndIsrResponse(ErrorCode.STALE_CONTROLLER_EPOCH), i16(25) + array()),
    (rp.StopReplicaResponse(ErrorCode.NONE, (rp.PartitionError("t", 0, 3),)),
     i16(0) + array(string("t") + i32(0) + i16(3))),
    (rp.OffsetForLeaderEpochResponse((rp.OffsetForLeaderEpochResult("t", 1, ErrorCode.NONE, 4,
                                                                    800),)),
     array(string("t") + i32(1) + i16(0) + i32(4) + i64(800))),
]


def test_the_new_error_codes_and_api_keys():
    assert [ErrorCode[name] for name in (
        "NOT_LEADER_FOR_PARTITION", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "STALE_CONTROLLER_EPOCH", "FENCED_LEADER_EPOCH", "LEADER_NOT_AVAILABLE",
        "REPLICA_NOT_AVAILABLE")] == list(range(22, 29))
    assert (api.ApiKey.LEADER_AND_ISR, api.ApiKey.STOP_REPLICA,
            api.ApiKey.OFFSET_FOR_LEADER_EPOCH) == (14, 15, 16)


@pytest.mark.parametrize("request_, key, version, body", REQUEST_BODIES,
                         ids=[type(case[0]).__name__ for case in REQUEST_BODIES])
def test_request_bytes_are_the_spec(request_, key, version, body):
    frame = rp.encode_request(request_, 77, "c")
    assert frame[4:] == request_frame(key, 77, "c", body, api_version=version)
    assert rp.request_version(frame[4:]) == (key, version)
    for decode in (rp.decode_request, rp.decode_any_request):
        header, decoded = decode(frame[4:])
        assert (header.api_key, header.api_version, header.correlation_id) == (key, version, 77)
        assert decoded == request_
    with pytest.raises(ProtocolError, match="left over"):
        rp.decode_request(frame[4:] + b"\x00")
    for end in range(len(frame) - 4):  # every truncation, as one byte at a time would see it
        with pytest.raises(ProtocolError) as info:
            rp.decode_request(frame[4:4 + end])
        assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("response, body", RESPONSE_BODIES,
                         ids=[type(case[0]).__name__ for case in RESPONSE_BODIES])
def test_response_bytes_are_the_spec(response, body):
    frame = rp.encode_response(-3, response)
    assert frame[4:] == i32(-3) + body
    assert rp.decode_response(frame[4:], type(response)) == (-3, response)
    with pytest.raises(ProtocolError):
        rp.decode_response(frame[4:] + b"\x00", type(response))
    for end in range(len(frame) - 4):
        with pytest.raises(ProtocolError):
            rp.decode_response(frame[4:4 + end], type(response))


@pytest.mark.parametrize("request_, _key, _version, _body", REQUEST_BODIES,
                         ids=[type(case[0]).__name__ for case in REQUEST_BODIES])
def test_version_0_decoders_still_answer_them_unsupported(request_, _key, _version, _body):
    frame = rp.encode_request(request_, 1)[4:]
    for decode in (api.decode_request, groups.decode_any_request):
        with pytest.raises(ProtocolError) as info:
            decode(frame)
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("key, version", [(3, 2), (1, 2), (14, 2), (15, -1), (16, 1), (17, 0),
                                          (0, 0), (8, 0)])
def test_other_keys_and_versions_are_unsupported_here(key, version):
    with pytest.raises(ProtocolError) as info:
        rp.decode_request(request_frame(key, 1, "c", array(), api_version=version))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@NO_DEADLINE
@given(requests)
def test_every_other_request_decodes_as_before(request_):
    frame = api.encode_request(request_, 3, "c")[4:]
    assert rp.decode_any_request(frame) == api.decode_request(frame)


def test_a_metadata_request_goes_out_as_version_1_and_others_refuse():
    frame = rp.encode_request(api.MetadataRequest(("t",)), 5, "c", version=1)
    assert rp.decode_request(frame[4:])[1] == rp.MetadataRequestV1(("t",))
    assert rp.encode_request(rp.MetadataRequestV1(("t",)), 5, "c", version=0) == \
        api.encode_request(api.MetadataRequest(("t",)), 5, "c")
    with pytest.raises(ValueError):
        rp.encode_request(api.FetchRequest(1, 1, ()), 5, "c", version=1)
    with pytest.raises(ValueError):
        rp.decode_response(b"\x00" * 8, api.FetchResponse)


def test_request_version_of_a_short_frame():
    assert rp.request_version(b"\x00") is None
    assert rp.request_version(b"\x00\x01\x00\x01") == (1, 1)


# -- bounds ------------------------------------------------------------------

def lai_body(partitions, controller=(1, 7), configs=array(), brokers=array()):
    return i32(controller[0]) + i32(controller[1]) + array(*partitions) + configs + brokers


def lai_partition(topic="t", p=0, leader=1, epoch=0, isr=(1,), replicas=(1, 2)):
    return (string(topic) + i32(p) + i32(leader) + i32(epoch) + array(*map(i32, isr)) + i32(0)
            + array(*map(i32, replicas)))


BAD_REQUESTS = [
    ("nine replicas", 14, 0, lai_body([lai_partition(isr=(1,), replicas=tuple(range(1, 10)))])),
    ("nine in the ISR", 14, 0, lai_body([lai_partition(isr=tuple(range(9)),
                                                       replicas=(1,))])),
    ("ISR outside replicas", 14, 0, lai_body([lai_partition(isr=(3,))])),
    ("leader outside replicas", 14, 0, lai_body([lai_partition(leader=5)])),
    ("leader -2", 14, 0, lai_body([lai_partition(leader=-2)])),
    ("replica twice", 14, 0, lai_body([lai_partition(replicas=(1, 1))])),
    ("ISR twice", 14, 0, lai_body([lai_partition(isr=(1, 1))])),
    ("no replicas", 14, 0, lai_body([lai_partition(leader=-1, isr=(), replicas=())])),
    ("negative replica", 14, 0, lai_body([lai_partition(leader=-1, isr=(), replicas=(-3,))])),
    ("negative leader epoch", 14, 0, lai_body([lai_partition(epoch=-1)])),
    ("negative partition", 14, 0, lai_body([lai_partition(p=-1)])),
    ("empty topic", 14, 0, lai_body([lai_partition(topic="")])),
    ("partition twice", 14, 0, lai_body([lai_partition(), lai_partition()])),
    ("negative controller epoch", 14, 0, lai_body([lai_partition()], controller=(1, -1))),
    ("controller -1", 14, 0, lai_body([lai_partition()], controller=(-1, 1))),
    ("configs twice", 14, 0, lai_body([], configs=array(string("t") + array(),
                                                        string("t") + array()))),
    ("config key twice", 14, 0, lai_body([], configs=array(
        string("t") + array(string("k") + string("1"), string("k") + string("2"))))),
    ("broker twice", 14, 0, lai_body([], brokers=array(
        *[i32(1) + string("h") + i32(1) + string(None)] * 2))),
    ("port out of range", 14, 0, lai_body([], brokers=array(
        i32(1) + string("h") + i32(70000) + string(None)))),
    ("delete flag 2", 15, 0, i32(1) + i32(1) + i8(2) + array()),
    ("stop partition twice", 15, 0, i32(1) + i32(1) + i8(0)
     + array(string("t") + i32(0), string("t") + i32(0))),
    ("fetch replica -3", 1, 1, i32(-3) + i32(0) + i32(0) + array()),
    ("fetch epoch -2", 1, 1, i32(1) + i32(0) + i32(0)
     + array(string("t") + i32(0) + i32(-2) + i64(0) + i32(1))),
    ("fetch partition twice", 1, 1, i32(1) + i32(0) + i32(0)
     + array(*[string("t") + i32(0) + i32(0) + i64(0) + i32(1)] * 2)),
    ("epoch asked -2", 16, 0, i32(1) + array(string("t") + i32(0) + i32(-2))),
    ("replica id -5", 16, 0, i32(-5) + array()),
    ("huge replica count", 14, 0, i32(1) + i32(1) + array(
        string("t") + i32(0) + i32(1) + i32(0) + i32(2**31 - 1))),
]


@pytest.mark.parametrize("what, key, version, body", BAD_REQUESTS,
                         ids=[case[0] for case in BAD_REQUESTS])
def test_values_out_of_bounds_are_invalid_requests(what, key, version, body):
    frame = request_frame(key, 9, "c", body, api_version=version)
    for decode in (rp.decode_request, rp.decode_any_request):
        with pytest.raises(ProtocolError) as info:
            decode(frame)
        assert info.value.code == ErrorCode.INVALID_REQUEST


def test_more_than_max_replicas_cannot_be_encoded():
    request = rp.LeaderAndIsrRequest(1, 1, (rp.LeaderAndIsrPartition(
        "t", 0, 1, 0, (1,), 0, tuple(range(1, rp.MAX_REPLICAS + 2))),))
    with pytest.raises(ValueError):
        rp.encode_request(request, 1)


def test_a_metadata_answer_with_an_isr_outside_its_replicas_is_refused():
    response = rp.MetadataResponseV1(1, -1, (), (rp.MetadataTopicV1("t", 0, (
        rp.MetadataPartitionV1(0, 0, 1, 0, (1,), (2,), 0, 0, None),)),))
    with pytest.raises(ProtocolError):
        rp.decode_response(rp.encode_response(1, response)[4:], rp.MetadataResponseV1)


def test_max_entries_bounds_the_arrays():
    frame = rp.encode_request(rp.StopReplicaRequest(
        1, 1, 0, tuple(rp.StopReplicaPartition("t", p) for p in range(10))), 1)[4:]
    assert rp.decode_request(frame, max_entries=10)
    with pytest.raises(ProtocolError):
        rp.decode_request(frame, max_entries=9)


# -- FETCH v1 for sendfile ----------------------------------------------------

HEADERS = [
    [rp.FetchV1PartitionHeader("t", 0, 0, 90, 100, 3, 5)],
    [("t", 0, 0, 90, 100, 3, 5), ("uu", 7, 26, -1, -1, -1, 0), ("t", 1, 0, 0, 0, 1, 2)],
    [],
]


@pytest.mark.parametrize("headers", HEADERS, ids=["one", "three", "none"])
def test_fetch_v1_parts_around_data_are_the_encoded_answer(headers):
    sets = [bytes([65 + i]) * h[6] for i, h in enumerate(headers)]
    chunks = rp.encode_fetch_v1_response_parts(42, headers)
    assert len(chunks) == len(headers) + 1
    frame = b"".join(c + s for c, s in zip(chunks, sets + [b""]))
    expected = rp.encode_response(42, rp.FetchResponseV1(tuple(
        rp.FetchPartitionResultV1(*h[:6], s) for h, s in zip(headers, sets))))
    assert frame == expected


def test_a_fetch_v1_part_emptied():
    headers = [("t", 0, 0, 90, 100, 3, 5), ("u", 1, 0, 7, 8, 2, 4)]
    chunks = rp.encode_fetch_v1_response_parts(1, headers)
    chunks[0] = api.frame_shrunk(chunks[0], 5)
    chunks[0] = rp.fetch_v1_part_emptied(chunks[0], 5, ErrorCode.NOT_LEADER_FOR_PARTITION)
    frame = chunks[0] + chunks[1] + b"dddd" + chunks[2]
    _, response = rp.decode_response(frame[4:], rp.FetchResponseV1)
    assert response.partitions[0] == rp.FetchPartitionResultV1(
        "t", 0, ErrorCode.NOT_LEADER_FOR_PARTITION, 90, 100, -1, b"")
    assert response.partitions[1].message_set == b"dddd"
    with pytest.raises(ValueError):
        rp.fetch_v1_part_emptied(chunks[1], 3, 0)


def test_fetch_v1_parts_refuse_what_does_not_fit():
    with pytest.raises(ValueError):
        rp.encode_fetch_v1_response_parts(1, [("t", 0, 0, 0, 0, 0, -1)])
    with pytest.raises(ValueError):
        rp.encode_fetch_v1_response_parts(1, [("t", 0, 0, 2**63, 0, 0, 1), ("u", 0, 0, 0, 0, 0, 0)])
    with pytest.raises(ValueError):
        rp.encode_fetch_v1_response_parts(1, [("t", 0, 0, 0, 0, 0, 2**31)])


# -- round trips ---------------------------------------------------------------

names = st.text(min_size=1, max_size=10)
broker_ids = st.integers(0, 2**31 - 1)
epochs = st.integers(0, 2**31 - 1)
small_ids = st.integers(0, 20)


def tuples_of(items, max_size=4):
    return st.lists(items, max_size=max_size).map(tuple)


@st.composite
def replica_sets(draw):
    replicas = tuple(draw(st.lists(small_ids, min_size=1, max_size=rp.MAX_REPLICAS, unique=True)))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), unique=True)))
    leader = draw(st.sampled_from((-1, *replicas)))
    return replicas, isr, leader


@st.composite
def lai_partitions(draw):
    out, seen = [], set()
    for _ in range(draw(st.integers(0, 4))):
        topic, p = draw(names), draw(st.integers(0, 2**31 - 1))
        if (topic, p) in seen:
            continue
        seen.add((topic, p))
        replicas, isr, leader = draw(replica_sets())
        out.append(rp.LeaderAndIsrPartition(topic, p, leader, draw(epochs), isr, draw(int32s),
                                            replicas))
    return tuple(out)


def unique_by(items, key):
    return st.lists(items, max_size=4, unique_by=key).map(tuple)


brokers = unique_by(st.builds(MetadataBroker, broker_ids, st.none() | names,
                              st.integers(0, 65535), st.none() | names), lambda b: b.broker_id)
topic_configs = unique_by(st.builds(rp.TopicConfigs, names, unique_by(
    st.builds(TopicConfigEntry, names, st.text(max_size=6)), lambda c: c.key)),
    lambda t: t.topic)

replication_requests = st.one_of(
    st.builds(rp.MetadataRequestV1, tuples_of(st.text(max_size=10))),
    st.builds(rp.FetchRequestV1, st.integers(-1, 2**31 - 1), int32s, int32s, unique_by(
        st.builds(rp.FetchPartitionV1, names, st.integers(0, 2**31 - 1),
                  st.integers(-1, 2**31 - 1), int64s, int32s),
        lambda p: (p.topic, p.partition))),
    st.builds(rp.LeaderAndIsrRequest, broker_ids, epochs, lai_partitions(), topic_configs,
              brokers),
    st.builds(rp.StopReplicaRequest, broker_ids, epochs, st.sampled_from([0, 1]), unique_by(
        st.builds(rp.StopReplicaPartition, names, st.integers(0, 2**31 - 1)),
        lambda p: (p.topic, p.partition))),
    st.builds(rp.OffsetForLeaderEpochRequest, st.integers(-1, 2**31 - 1), unique_by(
        st.builds(rp.OffsetForLeaderEpochPartition, names, st.integers(0, 2**31 - 1),
                  st.integers(-1, 2**31 - 1)),
        lambda p: (p.topic, p.partition))),
)


@st.composite
def metadata_partitions(draw):
    replicas, isr, leader = draw(replica_sets())
    return rp.MetadataPartitionV1(draw(int32s), draw(error_codes), leader, draw(int32s),
                                  replicas, isr, draw(int64s), draw(int64s),
                                  draw(st.none() | names))


partition_errors = tuples_of(st.builds(rp.PartitionError, names, int32s, error_codes))
replication_responses = st.one_of(
    st.builds(rp.MetadataResponseV1, int32s, int32s, brokers, tuples_of(st.builds(
        rp.MetadataTopicV1, names, error_codes, tuples_of(metadata_partitions())))),
    st.builds(rp.FetchResponseV1, tuples_of(st.builds(
        rp.FetchPartitionResultV1, names, int32s, error_codes, int64s, int64s, int32s,
        st.binary(max_size=32)))),
    st.builds(rp.LeaderAndIsrResponse, error_codes, partition_errors),
    st.builds(rp.StopReplicaResponse, error_codes, partition_errors),
    st.builds(rp.OffsetForLeaderEpochResponse, tuples_of(st.builds(
        rp.OffsetForLeaderEpochResult, names, int32s, error_codes, int32s, int64s))),
)


@NO_DEADLINE
@given(replication_requests, int32s)
def test_every_replication_request_round_trips(request_, correlation_id):
    frame = rp.encode_request(request_, correlation_id, "c")[4:]
    header, decoded = rp.decode_request(frame)
    assert decoded == request_ and header.correlation_id == correlation_id
    assert rp.decode_any_request(frame)[1] == request_


@NO_DEADLINE
@given(replication_responses, int32s)
def test_every_replication_response_round_trips(response, correlation_id):
    frame = rp.encode_response(correlation_id, response)[4:]
    assert rp.decode_response(frame, type(response)) == (correlation_id, response)


# -- fuzz: decode or ProtocolError, nothing else ---------------------------------

def survives(decode, frame):
    try:
        decode(frame)
    except ProtocolError:
        pass


RESPONSE_CLASSES = list(rp.REPLICATION_RESPONSE_TYPES.values())


@FUZZ
@given(st.sampled_from([(3, 1), (1, 1), (14, 0), (15, 0), (16, 0)]).flatmap(
    lambda kv: st.binary(max_size=160).map(
        lambda body: request_frame(kv[0], 1, "f", b"", api_version=kv[1]) + body)))
def test_random_bodies_behind_a_replication_header(frame):
    survives(rp.decode_request, frame)
    survives(rp.decode_any_request, frame)


@FUZZ
@given(mutated(st.builds(lambda r: rp.encode_request(r, 5, "f")[4:], replication_requests)))
def test_mutated_replication_requests(frame):
    rp.request_version(frame)
    survives(rp.decode_request, frame)
    survives(rp.decode_any_request, frame)


@FUZZ
@given(st.sampled_from(RESPONSE_CLASSES), st.binary(max_size=200))
def test_random_bytes_as_a_replication_response(cls, frame):
    survives(lambda f: rp.decode_response(f, cls), frame)


@FUZZ
@given(replication_responses.flatmap(
    lambda r: st.tuples(st.just(type(r)), mutated(st.just(rp.encode_response(3, r)[4:])))))
def test_mutated_replication_responses(cls_and_frame):
    cls, frame = cls_and_frame
    survives(lambda f: rp.decode_response(f, cls), frame)
