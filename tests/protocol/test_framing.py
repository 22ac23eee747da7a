import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import FrameReader, FrameTooLargeError

from tests.protocol.strategies import NO_DEADLINE
from tests.protocol.wire import i16, i32, sized


def test_nothing_until_a_frame_is_whole():
    reader = FrameReader()
    assert reader.next_frame() is None
    reader.feed(b"\x00\x00")
    assert reader.next_frame() is None
    reader.feed(b"\x00\x03ab")
    assert reader.next_frame() is None
    reader.feed(b"c\x00")
    assert reader.next_frame() == b"abc"
    assert reader.next_frame() is None
    assert reader.buffered == 1


def test_empty_frame_and_several_frames_in_one_feed():
    reader = FrameReader()
    reader.feed(sized(b"") + sized(b"one") + sized(b"two"))
    assert [reader.next_frame(), reader.next_frame(), reader.next_frame()] == [b"", b"one", b"two"]
    assert reader.next_frame() is None


@NO_DEADLINE
@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(1, 30))
def test_any_chunking_gives_the_same_frames(frames, chunk):
    stream = b"".join(map(sized, frames))
    reader = FrameReader()
    out = []
    for start in range(0, len(stream), chunk):
        reader.feed(memoryview(stream)[start : start + chunk])
        while (frame := reader.next_frame()) is not None:
            out.append(frame)
    assert out == frames
    assert reader.buffered == 0


def test_frame_over_the_limit_fails_on_its_size_alone():
    reader = FrameReader(max_frame_bytes=100)
    reader.feed(i32(100) + b"x" * 100)
    assert reader.next_frame() == b"x" * 100
    reader.feed(i32(101))
    with pytest.raises(FrameTooLargeError) as info:
        reader.next_frame()
    assert info.value.code == ErrorCode.REQUEST_TOO_LARGE
    assert (info.value.size, info.value.max_frame_bytes, info.value.correlation_id) == (101, 100, None)
    with pytest.raises(FrameTooLargeError):
        reader.next_frame()


def test_frame_over_the_limit_reports_the_correlation_id_when_it_arrived():
    reader = FrameReader(max_frame_bytes=10)
    reader.feed(i32(2**31 - 1) + i16(0) + i16(0) + i32(31337))
    with pytest.raises(FrameTooLargeError) as info:
        reader.next_frame()
    assert info.value.correlation_id == 31337


def test_negative_size():
    reader = FrameReader()
    reader.feed(i32(-1))
    with pytest.raises(ProtocolError) as info:
        reader.next_frame()
    assert info.value.code == ErrorCode.INVALID_REQUEST


def test_large_frames_in_small_pieces_take_linear_time():
    size = 32 * 1024 * 1024
    piece = bytes(64 * 1024)
    reader = FrameReader(max_frame_bytes=size)
    frame_sizes = []
    started = time.perf_counter()
    for _ in range(2):
        reader.feed(struct.pack(">i", size))
        for _ in range(size // len(piece)):
            reader.feed(piece)
            if (frame := reader.next_frame()) is not None:
                frame_sizes.append(len(frame))
    # Quadratic copying would take minutes here.
    assert time.perf_counter() - started < 5
    assert frame_sizes == [size, size]
    assert reader.buffered == 0


def test_many_small_frames_after_a_large_backlog():
    frames = [bytes([n % 256]) * 100 for n in range(20000)]
    reader = FrameReader()
    reader.feed(b"".join(map(sized, frames)))
    started = time.perf_counter()
    out = []
    while (frame := reader.next_frame()) is not None:
        out.append(frame)
    assert out == frames
    assert time.perf_counter() - started < 2
