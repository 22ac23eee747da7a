"""PRODUCE v1 and FETCH v2 (hostbroker/protocol/throttled.py): version 0's
requests, answers with throttle_time_ms at the end, and the processor's
patch of that field in an answer's pieces."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api, replication, throttled
from hostbroker.workers.answers import fetch_answer_pieces
from hostbroker.workers.envelopes import FilePiece


def _joined(pieces, files: dict) -> bytes:
    return b"".join(files[p.path][p.position:p.position + p.length]
                    if isinstance(p, FilePiece) else p for p in pieces)


def test_produce_v1_request_is_version_0_and_decodes_as_any_request():
    parts = (api.ProducePartition("t", 0, b"set"),)
    v0 = api.encode_request(api.ProduceRequest(1, 100, parts), 7, "c")
    v1 = api.encode_request(throttled.ProduceRequestV1(1, 100, parts), 7, "c")
    assert v1[:6] + b"\x00\x01" + v1[8:] == v1 and v0[8:] == v1[8:]
    header, request = replication.decode_any_request(v1[4:])
    assert (header.api_key, header.api_version) == (api.ApiKey.PRODUCE, 1)
    assert request == throttled.ProduceRequestV1(1, 100, parts)
    with pytest.raises(api.ProtocolError):  # version 0's decoder still refuses it
        api.decode_request(v1[4:])


def test_fetch_v2_request_decodes_and_v3_is_unsupported():
    parts = (api.FetchPartition("t", 1, 5, 1000),)
    frame = api.encode_request(throttled.FetchRequestV2(10, 1, parts), 3)
    _, request = replication.decode_any_request(frame[4:])
    assert request == throttled.FetchRequestV2(10, 1, parts)
    v3 = frame[:6] + b"\x00\x03" + frame[8:]
    with pytest.raises(api.ProtocolError) as e:
        replication.decode_any_request(v3[4:])
    assert e.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_a_produce_v1_answer_carries_the_throttle_time_patched_in():
    body = throttled.ProduceResponseV1((api.ProducePartitionResult("t", 0, 0, 5, 9),))
    frame = api.encode_response(11, body)
    pieces = [frame]
    assert throttled.set_throttle_time(pieces, 1234)
    corr, decoded = replication.decode_response(pieces[0][4:], throttled.ProduceResponseV1)
    assert corr == 11 and decoded.throttle_time_ms == 1234
    assert decoded.partitions == body.partitions
    assert throttled.read_throttle_time(pieces[0][4:]) == 1234


def test_an_error_frame_or_an_empty_answer_is_not_patched():
    error = [api.encode_error_frame(3, ErrorCode.INVALID_REQUEST)]
    assert not throttled.set_throttle_time(error, 50)
    assert error == [api.encode_error_frame(3, ErrorCode.INVALID_REQUEST)]
    assert not throttled.set_throttle_time([], 50)


@pytest.mark.parametrize("with_data", [True, False])
def test_fetch_v2_pieces_are_v0_with_the_throttle_time_after_the_last_set(with_data):
    files = {"/seg": b"0123456789abcdef"}
    piece = FilePiece("/seg", 2, 10) if with_data else None
    parts = [("t", 0, 0, 99, piece), ("u", 1, 0, 7, None)]
    v0 = fetch_answer_pieces(5, parts, 10_000)
    v2 = throttled.fetch_v2_parts(v0)
    assert throttled.set_throttle_time(v2, 250)
    frame = _joined(v2, files)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    corr, decoded = replication.decode_response(frame[4:], throttled.FetchResponseV2)
    assert corr == 5 and decoded.throttle_time_ms == 250
    _, old = api.decode_response(api.ApiKey.FETCH, _joined(v0, files)[4:])
    assert decoded.partitions == old.partitions


def test_fetch_v2_pieces_when_the_answer_ends_with_a_file_piece():
    files = {"/seg": b"x" * 32}
    v0 = fetch_answer_pieces(1, [("t", 0, 0, 32, FilePiece("/seg", 0, 32))], 10_000)
    assert isinstance(v0[-1], FilePiece)  # (its empty last header chunk left out)
    v2 = throttled.fetch_v2_parts(v0)
    assert v2[-1] == b"\x00\x00\x00\x00"
    assert throttled.set_throttle_time(v2, 9)
    _, decoded = replication.decode_response(_joined(v2, files)[4:], throttled.FetchResponseV2)
    assert decoded.throttle_time_ms == 9 and decoded.partitions[0].message_set == b"x" * 32


FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)


@FUZZ
@given(st.sampled_from([throttled.ProduceResponseV1, throttled.FetchResponseV2]),
       st.binary(max_size=120))
def test_random_bytes_as_a_throttled_answer_decode_or_raise_a_protocol_error(cls, frame):
    try:
        throttled.decode_response(frame, cls)
    except api.ProtocolError:
        pass


@FUZZ
@given(st.lists(st.one_of(st.binary(max_size=40), st.builds(FilePiece, st.just("/f"),
                                                            st.integers(0, 9),
                                                            st.integers(0, 9))),
                max_size=5),
       st.integers(-10, 2**40))
def test_the_throttle_time_patch_never_raises_and_keeps_the_lengths(pieces, ms):
    before = [len(p) if isinstance(p, bytes) else p for p in pieces]
    throttled.set_throttle_time(pieces, ms)
    assert [len(p) if isinstance(p, bytes) else p for p in pieces] == before
