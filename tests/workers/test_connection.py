"""The books of a connection (hostbroker/workers/connection.py): answers in
order whatever order they come in, buffers that grow with the bytes that came
and go back when their frame is done."""

import socket
import struct

import pytest

from hostbroker.workers import envelopes as env
from hostbroker.workers.connection import (
    CLOSE,
    END,
    RECV_CHUNK,
    SPARE_MAX,
    Buffers,
    Connection,
)


@pytest.fixture
def conn():
    a, b = socket.socketpair()
    yield Connection(a, 1, 0, 0.0)
    a.close()
    b.close()


def test_answers_go_out_in_order_of_their_places(conn):
    conn.next_seq = 4
    conn.order(2, [b"c"], 0)
    conn.order(1, [b"b1", b"b2"], 0)
    assert list(conn.out) == []
    conn.order(0, [b"a"], 0)
    assert list(conn.out) == [b"a", END, b"b1", b"b2", END, b"c", END]
    assert conn.queued == 6
    conn.order(3, [], 0)  # an acks=0 PRODUCE gives its place back
    assert list(conn.out)[-1] is END and len(conn.out) == 8
    assert conn.outstanding == 4  # until written


def test_an_error_frame_waits_for_earlier_answers_then_closes(conn):
    conn.order(1, [b"error"], env.RESP_CLOSE_AFTER)
    conn.order(2, [b"never"], 0)
    assert list(conn.out) == []
    conn.order(0, [b"first"], 0)
    assert list(conn.out) == [b"first", END, b"error", END, CLOSE]


def test_close_now_sends_nothing_of_its_own(conn):
    conn.order(0, [], env.RESP_CLOSE_NOW)
    assert list(conn.out) == [CLOSE]


def test_a_claimed_size_is_not_allocated(conn):
    buffers = Buffers()
    header = struct.pack(">ihhih", 100 * 1024 * 1024, 3, 0, 7, 0)
    conn.append(header, 0, buffers)
    assert conn.frame_need(100 * 1024 * 1024) == 4 + 100 * 1024 * 1024
    assert len(conn.buf) == len(header)


def test_a_buffer_grows_to_at_most_twice_what_came_and_not_past_its_frame(conn):
    buffers = Buffers()
    need = 4 + 3_000_000
    conn.append(struct.pack(">i", need - 4) + bytes(1000), 0, buffers)
    while conn.end < need:
        chunk = min(need - conn.end, 70_000)
        conn.append(bytes(chunk), need, buffers)
        assert len(conn.buf) <= max(2 * conn.end, RECV_CHUNK)
        assert len(conn.buf) <= need
    assert conn.end == need


def test_the_rest_after_a_frame_moves_to_the_front(conn):
    buffers = Buffers()
    conn.append(b"0123456789", 0, buffers)
    conn.consumed(6, buffers)
    assert (bytes(conn.buf[:conn.end]), conn.end) == (b"6789", 4)
    conn.consumed(4, buffers)
    assert (conn.buf, conn.end) == (None, 0)


def test_a_large_buffer_does_not_stay_with_a_small_rest(conn):
    buffers = Buffers()
    conn.append(bytes(SPARE_MAX + 1), 0, buffers)
    conn.consumed(SPARE_MAX - 9, buffers)
    assert conn.end == 10 and len(conn.buf) == 10
    assert buffers.spare is None  # over SPARE_MAX: freed, not kept
    assert buffers.freed == SPARE_MAX + 1


def test_one_spare_buffer_serves_the_next_large_frame(conn):
    buffers = Buffers()
    conn.append(bytes(RECV_CHUNK * 2), 0, buffers)
    big = conn.buf
    conn.consumed(conn.end, buffers)
    assert buffers.spare is big
    assert buffers.take(100) is not big  # small frames get small buffers
    assert buffers.take(RECV_CHUNK) is big
    assert buffers.spare is None


def test_a_lingering_connection_holds_nothing(conn):
    buffers = Buffers()
    conn.append(b"x" * 100, 0, buffers)
    conn.order(1, [b"later"], 0)  # an answer waiting for place 0
    conn.order(0, [b"error"], env.RESP_CLOSE_AFTER)
    conn.linger(5.0, 1024, buffers)
    assert (conn.buf, conn.end, conn.queued, conn.ready, list(conn.out)) == (None, 0, 0, {}, [])
    assert buffers.freed == 100 + len(b"later") + len(b"error")
    assert conn.lingering and conn.closing and conn.reading and not conn.writing
    assert (conn.linger_until, conn.linger_left) == (5.0, 1024)
