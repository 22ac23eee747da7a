"""A writer's bookkeeping across a delete and a re-create into the same slot.

The interleavings that take luck to hit over sockets (a flush still running
when its partition is deleted and the topic created again into the freed
slot; an append routed before a delete that lands after the slot was
re-used), driven step by step on a real writer's methods with a real
partition table, admin lock and log dir. Only the rings are stand-ins: the
writer's answers are recorded, and the flusher thread's one job is run by
the test when the interleaving wants it.
"""

from __future__ import annotations

import itertools
import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.config import LogConfig
from hostbroker.log.logdir import LogDir
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog
from hostbroker.shm import partitions as ptable
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.flusher import Flusher
from hostbroker.workers.writer import WriterWorker

SLOT = 2
_runs = itertools.count()
FAR = now_ms() + 3_600_000


class Recorder:
    """Stands in for a result ring: keeps every APPEND result sent."""

    def __init__(self):
        self.results = []

    def send(self, *parts):
        message = b"".join(parts)
        _, token, _, error, base, end = env.APPEND_RESULT.unpack_from(message, 0)
        self.results.append((token, error, base, end))

    def pending(self):
        return False


class Bell:
    def ring(self):
        pass


@pytest.fixture
def writer(tmp_path):
    token = f"w{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 8)
    lock = AdminLock.create(timeout=2.0)
    w = WriterWorker.__new__(WriterWorker)
    w.index, w.path = 0, str(tmp_path)
    w.defaults = LogConfig()
    w.table, w.lock = table, lock
    w.logdir = LogDir.open(str(tmp_path), w.defaults, now_ms)
    w.offline, w.appended = False, 0
    w.slots, w.published, w.dirty, w.waiters = {}, {}, set(), []
    w.flushing, w.undeletable, w.retention_stuck = {}, {}, set()
    w.direct, w.waiters_answered = [], set()
    w.senders = [Recorder()]
    w.answer_rings = []
    w.flusher = Flusher(Bell())  # not started: the test runs its jobs
    w.count = lambda *args: None
    yield w
    w.logdir.close()
    table.close()
    lock.remove()
    remove_stale(broker_prefix(token))


def create(w: WriterWorker, topic: str) -> None:
    """What a handler's CREATE_TOPIC does: the partition dir, then slot SLOT."""
    PartitionLog.create(w.path, topic, 0, 1, {}, w.defaults, now_ms).close()
    w.table.write(SLOT, state=ptable.ONLINE, name=topic, partition=0, owner=0,
                  start_offset=0, end_offset=0, flushed_offset=0, segment_generation=1)


def append(w: WriterWorker, token: int, topic: str, data: bytes, acks: int = -1) -> list:
    out = []
    head, body = env.encode_append(token, SLOT, topic, 0, 0, acks, 1, FAR, data)
    w._append(0, memoryview(head + body), out, set())
    return [env.APPEND_RESULT.unpack_from(parts[0], 0)[1:] for parts in out]


def run_flush_job(w: WriterWorker) -> None:
    """One turn of the flusher thread, then the writer takes its result."""
    slot, plog, fd, offset = w.flusher.jobs.get_nowait()
    os.fdatasync(fd)
    os.close(fd)
    w.flusher.done.put((slot, plog, offset, None))
    w._flushed()


def test_a_flush_of_a_deleted_partition_does_not_touch_the_one_created_in_its_slot(writer):
    w = writer
    create(w, "t")
    big = encode_message_set([b"old" * 300])
    assert append(w, 1, "t", big) == []  # acks=-1: waits for its flush
    w._flush([SLOT])  # the flush starts; the flusher thread has not run it yet
    assert w._delete({"slot": SLOT, "topic": "t", "partition": 0}) == {"error": 0}
    # the waiter is answered at the delete, its data unflushed and gone
    assert w.senders[0].results == [(1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert w.table.state(SLOT) == ptable.FREE and SLOT not in w.slots

    create(w, "t")  # created again, into the slot just freed
    small = encode_message_set([b"new"])
    assert append(w, 2, "t", small) == []
    new = w.slots[SLOT]
    run_flush_job(w)  # the old partition's flush returns now
    assert new.flushed_offset == 0, "the old flush moved the new partition's flushed offset"
    assert len(w.senders[0].results) == 1, "the new append was answered before its flush"

    w._flush([SLOT])
    run_flush_job(w)
    assert w.senders[0].results[1:] == [(2, ErrorCode.NONE, 0, len(small))]
    assert w.table.read(SLOT).flushed_offset == len(small)


def test_an_append_routed_before_a_delete_stays_out_of_the_partition_in_its_slot(writer):
    w = writer
    create(w, "t")
    assert w._delete({"slot": SLOT, "topic": "t", "partition": 0}) == {"error": 0}
    create(w, "u")  # another topic takes the freed slot
    data = encode_message_set([b"meant for t"])
    assert append(w, 3, "t", data, acks=1) == [(3, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert w.slots[SLOT].topic == "u" and w.slots[SLOT].log_end_offset == 0
    assert append(w, 4, "u", data, acks=1) == [(4, 0, ErrorCode.NONE, 0, len(data))]
    # a second DELETE_TOPIC of t, sent alongside the first, leaves u alone
    assert w._delete({"slot": SLOT, "topic": "t", "partition": 0}) == {"error": 0}
    assert w.table.read(SLOT).name == "u" and w.slots[SLOT].log_end_offset == len(data)
