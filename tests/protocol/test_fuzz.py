"""Whatever the bytes, decoders decode or raise ProtocolError; nothing else."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.errors import ProtocolError
from hostbroker.protocol import (
    ApiKey,
    FrameReader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    peek_correlation_id,
    peek_produce_acks,
)

from tests.protocol.strategies import requests, responses_by_api

FUZZ = settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def survives(decode, frame):
    try:
        decode(frame)
    except ProtocolError:
        pass


@st.composite
def mutated(draw, frames):
    """A valid frame with a few bytes changed, cut, inserted or an int32 overwritten."""
    frame = bytearray(draw(frames))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "int32"]))
        at = draw(st.integers(0, max(len(frame) - 1, 0)))
        if kind == "flip" and frame:
            frame[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del frame[at : at + draw(st.integers(1, 8))]
        elif kind == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "int32":
            value = draw(st.sampled_from([-1, -2, 0, 1, 2**31 - 1, -(2**31), 255, 65535]))
            frame[at : at + 4] = value.to_bytes(4, "big", signed=True)
    return bytes(frame)


request_frames = st.builds(lambda r, cid: encode_request(r, cid, "fuzz")[4:], requests,
                           st.integers(0, 2**31 - 1))
api_keys = st.sampled_from(list(ApiKey))


def decode_everything_as_a_request(frame):
    peek_correlation_id(frame)
    peek_produce_acks(frame)
    survives(decode_request_header, frame)
    survives(decode_request, frame)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_as_a_request(frame):
    decode_everything_as_a_request(frame)


@FUZZ
@given(st.tuples(st.integers(-2, 12), st.integers(-1, 1)).flatmap(
    lambda key_version: st.binary(max_size=120).map(
        lambda body: key_version[0].to_bytes(2, "big", signed=True)
        + key_version[1].to_bytes(2, "big", signed=True) + b"\x00\x00\x00\x01\x00\x00" + body)))
def test_random_bodies_behind_a_plausible_header(frame):
    decode_everything_as_a_request(frame)


@FUZZ
@given(mutated(request_frames))
def test_mutated_requests(frame):
    decode_everything_as_a_request(frame)


@FUZZ
@given(api_keys, st.binary(max_size=200))
def test_random_bytes_as_a_response(api_key, frame):
    survives(lambda f: decode_response(api_key, f), frame)


@FUZZ
@given(responses_by_api.flatmap(
    lambda pair: st.tuples(st.just(pair[0]),
                           mutated(st.just(encode_response(3, pair[1])[4:])))))
def test_mutated_responses(api_key_and_frame):
    api_key, frame = api_key_and_frame
    survives(lambda f: decode_response(api_key, f), frame)


@FUZZ
@given(st.binary(max_size=300), st.integers(1, 50))
def test_random_stream_into_the_frame_reader(stream, chunk):
    reader = FrameReader(max_frame_bytes=1000)
    try:
        for start in range(0, len(stream), chunk):
            reader.feed(stream[start : start + chunk])
            while (frame := reader.next_frame()) is not None:
                survives(decode_request, frame)
    except ProtocolError:
        pass


@FUZZ
@given(st.tuples(st.integers(-1, 19), st.integers(-1, 3)).flatmap(
    lambda key_version: st.binary(max_size=160).map(
        lambda body: key_version[0].to_bytes(2, "big", signed=True)
        + key_version[1].to_bytes(2, "big", signed=True) + b"\x00\x00\x00\x01\x00\x00" + body)))
def test_random_bodies_behind_any_header_the_broker_decodes(frame):
    """Every decoder the handler runs (replication's decode_any_request routes the
    group APIs, replication's and those of replicas across log dirs)."""
    from hostbroker.protocol import logdirs, replication

    survives(replication.decode_any_request, frame)
    survives(logdirs.decode_request, frame)
