"""A writer appending a message set straight from a request ring (APPEND_REF),
driven step by step on a real writer with a real ring, partition table and
log dir. The handler's death is the one stand-in: the board that says whether
it lives answers what the test wants before and after the write, the timing
a kill would need luck to hit.
"""

from __future__ import annotations

import os
import threading
import time

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.shm import procs
from hostbroker.shm.ring import Ring
from hostbroker.workers import envelopes as env
from tests.workers.test_writer_deletes import FAR, SLOT, create, run_flush_job, writer  # noqa: F401

EPOCH = 3


class Board:
    """The handler's slot as the writer reads it: its epoch, and its state at
    each look (the last one repeats)."""

    def __init__(self, *states: int, epoch: int = EPOCH):
        self.states = list(states)
        self.epoch_value = epoch

    def epoch(self, slot: int) -> int:
        return self.epoch_value

    def state(self, slot: int) -> int:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def held_in_ring(w, data: bytes) -> env.Ref:
    """Put ``data`` in a request ring the way a processor does, read it the way
    the handler does, and give the writer that ring (processor 0, handler 0)."""
    ring = Ring.create(f"/hbtw{os.getpid()}r{time.monotonic_ns()}", 64 * 1024)
    consumer = Ring.attach(ring.name)
    assert ring.try_put(b"frame head", data)
    ring.publish()
    [record] = consumer.read()
    offset = consumer.data_offset(record[10:])
    consumer.hold(offset)
    w.request_rings = [[consumer]]
    w.handler_slots = [0]
    w._test_rings = (ring, consumer)
    return env.Ref(0, offset, len(data), EPOCH)


def append_ref(w, token: int, ref: env.Ref, acks: int = 1) -> list:
    """The results of one APPEND_REF; it must also say, once, that the bytes
    are free (REF_DONE), whatever came of it."""
    out = []
    head, body = env.encode_append(token, SLOT, "t", 0, 2, acks, 1, FAR, b"", ref=ref)
    w._append(0, memoryview(head + body), out, set())
    done = [parts for parts in out if parts[0][0] == env.OP_REF_DONE]
    assert [env.REF_DONE.unpack_from(parts[0], 0) for parts in done] == [
        (env.OP_REF_DONE, token, 2)]
    return [env.APPEND_RESULT.unpack_from(parts[0], 0)[1:] for parts in out
            if parts[0][0] == env.OP_APPEND]


def close_rings(w) -> None:
    ring, consumer = w._test_rings
    consumer.close()
    ring.close()
    ring.unlink()


def test_a_ref_is_appended_from_the_ring_bytes(writer):
    w = writer
    create(w, "t")
    data = encode_message_set([b"x" * 5000, b"y" * 3000])
    ref = held_in_ring(w, data)
    w.board = Board(procs.WORKER_READY)
    try:
        assert append_ref(w, 1, ref) == [(1, 2, ErrorCode.NONE, 0, len(data))]
        # acks=-1: free at once, answered after its flush; acks=0: never answered
        assert append_ref(w, 2, ref, acks=-1) == []
        assert [x.token for x in w.waiters] == [2]
        assert append_ref(w, 3, ref, acks=0) == []
        with open(w.slots[SLOT].segment_path(0), "rb") as f:
            assert f.read() == data * 3
    finally:
        close_rings(w)


def test_a_ref_from_a_handler_already_dead_is_not_appended(writer):
    w = writer
    create(w, "t")
    data = encode_message_set([b"x" * 5000])
    ref = held_in_ring(w, data)
    try:
        w.board = Board(procs.WORKER_EXITED)
        assert append_ref(w, 1, ref) == [(1, 2, ErrorCode.UNKNOWN, -1, -1)]
        w.board = Board(procs.WORKER_READY, epoch=EPOCH + 1)  # replaced already
        assert append_ref(w, 2, ref) == [(2, 2, ErrorCode.UNKNOWN, -1, -1)]
        assert w.slots[SLOT].log_end_offset == 0
    finally:
        close_rings(w)


def test_a_ref_whose_handler_died_during_the_write_is_cut_off(writer):
    w = writer
    create(w, "t")
    first = encode_message_set([b"kept"])
    data = encode_message_set([b"x" * 5000])
    ref = held_in_ring(w, data)
    try:
        w.board = Board(procs.WORKER_READY)
        assert append_ref(w, 1, ref) == [(1, 2, ErrorCode.NONE, 0, len(data))]
        # alive when the writer looks before the write, dead when it looks after
        w.board = Board(procs.WORKER_READY, procs.WORKER_EXITED)
        assert append_ref(w, 2, ref) == [(2, 2, ErrorCode.UNKNOWN, -1, -1)]
        plog = w.slots[SLOT]
        assert plog.log_end_offset == len(data), "the torn append was not cut"
        # the next append lands where the cut one began
        out = []
        head, body = env.encode_append(3, SLOT, "t", 0, 0, 1, 1, FAR, first)
        w._append(0, memoryview(head + body), out, set())
        result = env.APPEND_RESULT.unpack_from(out[0][0], 0)
        assert result[3:] == (0, len(data), len(data) + len(first))
        with open(plog.segment_path(0), "rb") as f:
            assert f.read() == data + first
    finally:
        close_rings(w)


def test_a_cut_waits_for_a_flush_in_flight(writer):
    """A flush begun before the cut must not mark durable the bytes appended at
    the cut offsets afterwards: the cut waits for it to return first."""
    w = writer
    create(w, "t")
    data = encode_message_set([b"x" * 5000])
    ref = held_in_ring(w, data)
    try:
        w.board = Board(procs.WORKER_READY)
        assert append_ref(w, 1, ref)[0][2] == ErrorCode.NONE
        w._flush([SLOT])  # the flusher thread has not run it yet
        assert SLOT in w.flushing
        runner = threading.Timer(0.2, lambda: w.flusher.done.put(
            (lambda job: (os.close(job[2]), (job[0], job[1], job[3], None))[1])(
                w.flusher.jobs.get_nowait())))
        runner.start()
        w.board = Board(procs.WORKER_READY, procs.WORKER_EXITED)
        started = time.monotonic()
        assert append_ref(w, 2, ref)[0][2] == ErrorCode.UNKNOWN
        assert time.monotonic() - started >= 0.15, "the cut did not wait for the flush"
        runner.join()
        plog = w.slots[SLOT]
        assert SLOT not in w.flushing
        assert plog.log_end_offset == len(data)
        assert plog.flushed_offset == len(data)
    finally:
        close_rings(w)
