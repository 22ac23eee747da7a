"""A writer's replicas: roles, the ISR, the high watermark, acks=-1, and what
hb-replica brings from the leader.

Driven step by step on a real writer's methods with a real partition table,
ISR commit table, admin lock and log dir (the fixture of
``test_writer_deletes``); only the rings are stand-ins and the clock is a
fake one, so that a follower can stay silent past ``replica.lag.time.max.ms``
in no time.
"""

from __future__ import annotations

import itertools
import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log import hwcheckpoint
from hostbroker.log.config import LogConfig
from hostbroker.log.logdir import LogDir
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog
from hostbroker.shm import partitions as ptable
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.partitions import IsrCommitTable, PartitionTable, isr_bits
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers import envelopes as env
from hostbroker.workers import writer_replicas
from hostbroker.workers.base import now_ms
from hostbroker.workers.flusher import Flusher
from hostbroker.workers.writer import WriterWorker
from hostbroker.workers.writer_polls import _NEVER
from hostbroker.workers.writer_replicas import (FENCED_LEADER_EPOCH, NOT_ENOUGH_REPLICAS,
                                                NOT_LEADER)
from tests.workers import test_writer_deletes as deletes
from tests.workers.test_writer_deletes import FAR, SLOT, run_flush_job

ME, OTHER, THIRD = 1, 2, 3
LAG_MS = 10_000
_runs = itertools.count()


class Clock:
    def __init__(self):
        self.ms = now_ms()

    def __call__(self) -> int:
        return self.ms


class Ring:
    """Stands in for the rres ring (and a doorbell): keeps what is sent."""

    def __init__(self):
        self.sent = []

    def send(self, *parts):
        self.sent.append(b"".join(bytes(p) for p in parts))

    def pump(self):
        return True

    def pending(self):
        return False

    def wake(self, needed=None):
        pass


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(writer_replicas, "now_ms", c)
    return c


@pytest.fixture
def w(tmp_path, clock):
    token = f"r{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 8)
    commits = IsrCommitTable.create(region_name(token, "isr_commits", 0), 8)
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
    w.senders = [deletes.Recorder()]
    w.answer_rings = []
    w.flusher = Flusher(deletes.Bell())  # not started: the test runs its jobs
    w.count = lambda *args: None
    w.wait_ns = 0
    # what _init_replicas sets up, with broker id ME and our stand-in rings
    w.broker_id = ME
    w.books, w.isr_pending, w.start_hws, w.hw_checkpoint = {}, set(), {}, None
    w.leading = set()
    w.lag_ms, w.lag_bytes = LAG_MS, 1 << 20
    w.isr_check_ms = clock() + 1000
    w.isr_commits = commits
    w.rres, w.replica_bell = Ring(), Ring()
    w.polls, w.polls_held, w.polls_new, w.polls_deadline = {}, 0, set(), _NEVER
    w.max_polls, w.max_response_bytes = 10, 1 << 20
    yield w
    w.logdir.close()
    table.close()
    commits.close()
    lock.remove()
    remove_stale(broker_prefix(token))


def create_replica(w, topic="r", replicas=(ME, OTHER), overrides=None):
    """What a handler's LEADER_AND_ISR does for a partition new here: the
    partition dir marked replicated, then slot SLOT claimed STOPPED."""
    PartitionLog.create(w.path, topic, 0, 1, overrides or {}, w.defaults, now_ms,
                        replicated=True).close()
    w.table.claim_replica(SLOT, list(replicas), leader=-1, leader_epoch=0, state=ptable.ONLINE,
                          name=topic, partition=0, owner=0, start_offset=0, end_offset=0,
                          flushed_offset=0, segment_generation=1)


def state(w, role, epoch, leader=ME, isr=(ME, OTHER), replicas=(ME, OTHER), topic="r",
          **extra):
    request = {"slot": SLOT, "topic": topic, "partition": 0, "role": role, "leader": leader,
               "leader_epoch": epoch, "isr": list(isr), "isr_version": 0,
               "replicas": list(replicas), "delete": False, "config": None, **extra}
    return w._replica_state(request)


def produce(w, token, data, acks=-1, topic="r"):
    out = []
    head, body = env.encode_append(token, SLOT, topic, 0, 0, acks, 1, FAR, data)
    w._append(0, memoryview(head + body), out, set())
    w._publish(SLOT, w.slots[SLOT])
    return [env.APPEND_RESULT.unpack_from(parts[0], 0)[1:] for parts in out]


def follower_fetched(w, offset, epoch, replica=OTHER):
    w._follower_pos(memoryview(env.encode_follower_pos(
        env.FollowerPos(SLOT, "r", 0, replica, epoch, offset))))


def round_(w, now):
    moved = w._replicas_round(now)
    w._answer_waiters()
    return moved


def flush(w):
    w._flush([SLOT])
    run_flush_job(w)


def leo(w):
    return w.slots[SLOT].log_end_offset


def test_a_new_leader_saves_its_epoch_before_the_slot_says_so(w):
    create_replica(w)
    assert state(w, "leader", 3) == {"error": 0}
    s = w.table.read(SLOT)
    assert (s.role, s.leader, s.leader_epoch, s.isr_ids, s.epoch_start) == \
        (ptable.ROLE_LEADER, ME, 3, (ME, OTHER), 0)
    with open(os.path.join(w.slots[SLOT].path, "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n1\n3 0\n"
    assert state(w, "follower", 2, leader=OTHER)["error"] == FENCED_LEADER_EPOCH
    assert w.table.read(SLOT).role == ptable.ROLE_LEADER  # nothing changed


def test_acks_all_is_answered_once_the_isr_has_the_data(w, clock):
    create_replica(w)
    state(w, "leader", 1)
    data = encode_message_set([b"m" * 100])
    assert produce(w, 1, data) == []
    flush(w)
    assert w.senders[0].results == []  # flushed here, but the follower has not fetched it
    assert w.table.read(SLOT).high_watermark == 0
    follower_fetched(w, 0, 1)
    round_(w, clock())
    assert w.senders[0].results == []
    follower_fetched(w, len(data), 1)
    assert round_(w, clock()) == {SLOT}  # the HW moved: parked fetches look again
    assert w.senders[0].results == [(1, ErrorCode.NONE, 0, len(data))]
    s = w.table.read(SLOT)
    assert s.high_watermark == len(data) and s.readable_end == len(data)


def test_a_position_of_another_epoch_or_a_stranger_moves_nothing(w, clock):
    create_replica(w)
    state(w, "leader", 4)
    produce(w, 1, encode_message_set([b"x"]), acks=1)
    for epoch, replica in ((3, OTHER), (5, OTHER), (4, THIRD), (4, ME)):
        follower_fetched(w, leo(w), epoch, replica)
        round_(w, clock())
        assert w.table.read(SLOT).high_watermark == 0


def test_a_silent_follower_leaves_the_isr_and_min_insync_replicas_refuses(w, clock):
    create_replica(w, overrides={"min.insync.replicas": "2"})
    state(w, "leader", 1)
    first = encode_message_set([b"a"])
    assert produce(w, 1, first, acks=1) == [(1, 0, ErrorCode.NONE, 0, len(first))]
    clock.ms += LAG_MS + 1
    round_(w, clock.ms)
    s = w.table.read(SLOT)
    assert s.isr_wanted_ids == (ME,) and s.isr_ids == (ME, OTHER)  # not committed yet
    # the HW stays below what the committed ISR has not got
    assert s.high_watermark == 0
    # the registrar wrote the smaller ISR to ZooKeeper: the writer adopts it
    w.isr_commits.commit(SLOT, version=1, isr_bits=isr_bits([ME, OTHER], [ME]), leader_epoch=1)
    round_(w, clock.ms)
    s = w.table.read(SLOT)
    assert (s.isr_ids, s.isr_version, s.high_watermark) == ((ME,), 1, len(first))
    # now an acks=-1 produce is refused before anything is appended
    assert produce(w, 2, encode_message_set([b"b"])) == [(2, 0, NOT_ENOUGH_REPLICAS, -1, -1)]
    assert leo(w) == len(first)
    # the follower catches up: it is wanted back, and once committed acks=-1 works again
    follower_fetched(w, len(first), 1)
    round_(w, clock.ms)
    assert w.table.read(SLOT).isr_wanted_ids == (ME, OTHER)
    w.isr_commits.commit(SLOT, version=2, isr_bits=0b11, leader_epoch=1)
    round_(w, clock.ms)
    assert w.table.read(SLOT).isr_ids == (ME, OTHER)
    assert produce(w, 3, encode_message_set([b"c"])) == []


def test_a_follower_asked_into_the_isr_holds_acks_all_before_the_commit(w, clock):
    # ZooKeeper may name it in the ISR (electable) before the writer adopts
    # the commit: what it lacks is not acknowledged meanwhile
    create_replica(w)
    state(w, "leader", 1, isr=(ME,))
    follower_fetched(w, 0, 1)
    round_(w, clock())
    assert w.table.read(SLOT).isr_wanted_ids == (ME, OTHER)
    data = encode_message_set([b"m" * 10])
    assert produce(w, 1, data) == []
    flush(w)
    round_(w, clock())
    assert w.senders[0].results == [] and w.table.read(SLOT).high_watermark == 0
    follower_fetched(w, len(data), 1)
    round_(w, clock())
    assert w.senders[0].results == [(1, ErrorCode.NONE, 0, len(data))]


def test_a_commit_of_another_epoch_is_not_adopted(w, clock):
    create_replica(w)
    state(w, "leader", 2)
    clock.ms += LAG_MS + 1
    round_(w, clock.ms)
    w.isr_commits.commit(SLOT, version=1, isr_bits=0b01, leader_epoch=1)
    round_(w, clock.ms)
    assert w.table.read(SLOT).isr_ids == (ME, OTHER)


def test_a_follower_refuses_every_produce(w):
    create_replica(w)
    state(w, "follower", 1, leader=OTHER)
    data = encode_message_set([b"x"])
    for acks in (0, 1, -1):
        assert produce(w, 7, data, acks=acks) == [(7, 0, NOT_LEADER, -1, -1)]
    assert leo(w) == 0
    # a lone PUT too (answered to the processor: kept in this round's direct answers)
    head, body = env.encode_put(SLOT, "r", 0, FAR, data, 0, env.Direct(0, 1, 0, 9))
    w._put(memoryview(head + bytes(body)), set())
    assert [(code, base) for _, _, code, base, _ in w.direct] == [(NOT_LEADER, -1)]
    assert leo(w) == 0


def test_a_replica_with_no_leader_known_refuses_produce_too(w):
    create_replica(w)
    w._adopt(SLOT)
    assert w.table.read(SLOT).role == ptable.ROLE_STOPPED
    assert produce(w, 1, encode_message_set([b"x"]), acks=1) == [(1, 0, NOT_LEADER, -1, -1)]


def test_losing_leadership_answers_the_waiting_acks_all(w):
    create_replica(w)
    state(w, "leader", 1)
    produce(w, 5, encode_message_set([b"x"]))
    flush(w)
    assert w.senders[0].results == []
    assert state(w, "follower", 2, leader=OTHER) == {"error": 0}
    assert w.senders[0].results == [(5, NOT_LEADER, -1, -1)]


def replica_append(w, base, data, epoch=1, data_epoch=1, leader_hw=0, token=9):
    head, body = env.encode_replica_append(env.ReplicaAppend(
        token, SLOT, "r", 0, epoch, data_epoch, base, leader_hw, data))
    touched = set()
    answer = w._replica_append(memoryview(head + bytes(body)), touched)
    if touched:
        w._publish(SLOT, w.slots[SLOT])
    return env.decode_replica_append_result(answer)[1:]


def test_a_follower_appends_the_leaders_bytes_at_the_same_offsets(w):
    create_replica(w)
    state(w, "follower", 1, leader=OTHER)
    one = encode_message_set([b"one"])
    two = encode_message_set([b"two", b"three"])
    assert replica_append(w, 0, one, leader_hw=0) == (ErrorCode.NONE, len(one))
    assert replica_append(w, len(one), two, data_epoch=1, leader_hw=len(one)) == \
        (ErrorCode.NONE, len(one) + len(two))
    with open(w.slots[SLOT].segment_path(0), "rb") as f:
        assert f.read() == one + two  # byte for byte
    s = w.table.read(SLOT)
    assert (s.end_offset, s.high_watermark) == (len(one) + len(two), len(one))
    assert w.books[SLOT].epochs.entries[-1][0] == 1


def test_a_follower_refuses_appends_out_of_place_out_of_epoch_or_damaged(w):
    create_replica(w)
    state(w, "follower", 2, leader=OTHER)
    data = encode_message_set([b"x" * 50])
    assert replica_append(w, 5, data, epoch=2) == (ErrorCode.OFFSET_OUT_OF_RANGE, 0)
    assert replica_append(w, 0, data, epoch=1) == (FENCED_LEADER_EPOCH, 0)
    assert replica_append(w, 0, data, epoch=3) == (NOT_LEADER, 0)
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    assert replica_append(w, 0, bytes(damaged), epoch=2)[0] == ErrorCode.INVALID_MESSAGE
    assert replica_append(w, 0, data[:-3], epoch=2)[0] == ErrorCode.INVALID_MESSAGE  # cut short
    assert leo(w) == 0


def test_truncation_cuts_the_log_and_its_epochs_exactly(w):
    create_replica(w)
    state(w, "follower", 1, leader=OTHER)
    one, two = encode_message_set([b"one"]), encode_message_set([b"two"])
    replica_append(w, 0, one, data_epoch=0)
    replica_append(w, len(one), two, data_epoch=1, leader_hw=len(one) + len(two))
    assert [e for e, _ in w.books[SLOT].epochs.entries] == [0, 1]
    request = {"slot": SLOT, "topic": "r", "partition": 0, "leader_epoch": 1, "offset": len(one)}
    assert w._truncate(request) == {"error": 0, "log_end": len(one)}
    assert [e for e, _ in w.books[SLOT].epochs.entries] == [0]
    s = w.table.read(SLOT)
    assert (s.end_offset, s.high_watermark) == (len(one), len(one))
    assert w._truncate({**request, "leader_epoch": 0})["error"] == FENCED_LEADER_EPOCH
    assert w._truncate({**request, "slot": "x"})["error"] == ErrorCode.INVALID_REQUEST
    assert leo(w) == len(one)


def test_bad_replica_states_are_refused_with_nothing_changed(w):
    create_replica(w)
    assert state(w, "leader", 1, replicas=list(range(9)))["error"] == ErrorCode.INVALID_REQUEST
    assert state(w, "leader", 1, replicas=[OTHER, THIRD])["error"] == ErrorCode.INVALID_REQUEST
    assert state(w, "king", 1)["error"] == ErrorCode.INVALID_REQUEST
    assert state(w, "leader", 2**31)["error"] == ErrorCode.INVALID_REQUEST
    assert state(w, "leader", 1, topic="other")["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert w.table.read(SLOT).role == ptable.ROLE_STOPPED


def test_a_plain_partition_cannot_be_made_a_replica(w):
    deletes.create(w, "p")
    assert state(w, "leader", 1, topic="p")["error"] == ErrorCode.INVALID_REQUEST
    assert produce(w, 1, encode_message_set([b"x"]), acks=1, topic="p")[0][2] == ErrorCode.NONE


def test_consumer_polls_read_below_the_high_watermark(w, clock):
    create_replica(w)
    state(w, "leader", 1)
    data = encode_message_set([b"m" * 10])
    produce(w, 1, data, acks=1)
    poll = env.Poll(5, SLOT, "r", 0, 0, 1 << 20, 1, FAR, env.Direct(0, 11, 0, 70))
    part, length = w._poll_part(poll, w.slots[SLOT])
    assert (part[3], length) == (0, 0)  # nothing below the HW yet
    follower_fetched(w, len(data), 1)
    round_(w, clock())
    part, length = w._poll_part(poll, w.slots[SLOT])
    assert (part[3], length) == (len(data), len(data))


def test_a_consumer_poll_stops_at_the_high_watermark_inside_a_segment(w, clock):
    # the HW sits inside a segment another one follows: the poll's range ends
    # at the HW, not at the end of that segment
    create_replica(w, overrides={"segment.bytes": "64"})
    state(w, "leader", 1)
    first, second = encode_message_set([b"a" * 10]), encode_message_set([b"b" * 10])
    produce(w, 1, first, acks=1)
    follower_fetched(w, len(first), 1)
    round_(w, clock())
    produce(w, 2, second, acks=1)
    produce(w, 3, encode_message_set([b"c" * 40]), acks=1)  # rolls a segment
    assert w.slots[SLOT].segment_bases == [0, len(first) + len(second)]
    assert w.table.read(SLOT).high_watermark == len(first)
    for offset in (0, 10, len(first)):
        poll = env.Poll(5, SLOT, "r", 0, offset, 1 << 20, 1, FAR, env.Direct(0, 11, 0, 70))
        part, length = w._poll_part(poll, w.slots[SLOT])
        assert (part[3], length) == (len(first), len(first) - offset)
        assert (part[4] is None) == (offset == len(first))


def test_the_high_watermark_checkpoint_round_trips_and_a_bad_one_is_ignored(w, tmp_path):
    create_replica(w)
    state(w, "follower", 1, leader=OTHER)
    data = encode_message_set([b"x"])
    replica_append(w, 0, data, leader_hw=len(data))
    w._checkpoint_hws()
    marks, problem = hwcheckpoint.read_high_watermarks(w.path)
    assert (marks, problem) == ({("r", 0): len(data)}, None)
    with open(os.path.join(w.path, hwcheckpoint.HW_CHECKPOINT_FILE), "wb") as f:
        f.write(b"0\n5\nr 0 12\n")
    marks, problem = hwcheckpoint.read_high_watermarks(w.path)
    assert marks == {} and "does not match" in problem and "starts at 0" in problem


def test_a_replaced_writer_rebuilds_its_books_from_the_table(w, clock):
    create_replica(w)
    state(w, "leader", 3)
    data = encode_message_set([b"x"])
    produce(w, 1, data, acks=1)
    follower_fetched(w, len(data), 3)
    round_(w, clock())
    flush(w)
    before = w.table.read(SLOT)
    # the writer dies; its successor registers the partitions from files + table
    w.books, w.slots, w.published = {}, {}, {}
    w.logdir.close()
    w.logdir = LogDir.open(w.path, w.defaults, now_ms)
    w._register_partitions()
    book = w.books[SLOT]
    assert (book.role, book.leader_epoch, book.isr, book.hw) == \
        (ptable.ROLE_LEADER, 3, (ME, OTHER), len(data))
    after = w.table.read(SLOT)
    assert after._replace(segment_generation=0) == before._replace(segment_generation=0)


def test_a_leader_alone_in_its_isr_moves_the_hw_with_its_appends(w, clock):
    create_replica(w)
    state(w, "leader", 1, isr=(ME,))
    data = encode_message_set([b"solo"])
    touched = set()
    out = []
    head, body = env.encode_append(4, SLOT, "r", 0, 0, -1, 1, FAR, data)
    w._append(0, memoryview(head + body), out, touched)
    w._publish(SLOT, w.slots[SLOT])
    assert w._replicas_round(clock(), touched) == {SLOT}
    flush(w)
    assert w.senders[0].results == [(4, ErrorCode.NONE, 0, len(data))]


def test_stop_replica_with_delete_removes_the_partition(w):
    create_replica(w)
    state(w, "leader", 1)
    path = w.slots[SLOT].path
    assert w._replica_state({"slot": SLOT, "topic": "r", "partition": 0, "delete": True}) == \
        {"error": 0}
    assert not os.path.exists(path) and SLOT not in w.books
    assert w.table.read(SLOT).role == ptable.ROLE_PLAIN  # the freed slot


def test_a_delete_answers_an_acks_all_the_isr_lacks_as_lost(w, clock):
    # flushed on the leader alone: deleting the partition does not make it a success
    create_replica(w)
    state(w, "leader", 1)
    produce(w, 1, encode_message_set([b"x"]))
    flush(w)
    assert w.senders[0].results == []
    assert w._replica_state({"slot": SLOT, "topic": "r", "partition": 0, "delete": True}) == \
        {"error": 0}
    assert w.senders[0].results == [(1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


def test_an_older_isr_in_the_same_epoch_does_not_undo_a_commit(w, clock):
    create_replica(w)
    state(w, "leader", 1)
    clock.ms += LAG_MS + 1
    round_(w, clock.ms)
    w.isr_commits.commit(SLOT, version=4, isr_bits=0b01, leader_epoch=1)
    round_(w, clock.ms)
    assert w.table.read(SLOT).isr_ids == (ME,)
    assert state(w, "leader", 1, isr=(ME, OTHER), isr_version=3) == {"error": 0}
    assert (w.table.read(SLOT).isr_ids, w.table.read(SLOT).isr_version) == ((ME,), 4)
    assert state(w, "leader", 1, isr=(ME, OTHER), isr_version=5) == {"error": 0}
    assert w.table.read(SLOT).isr_ids == (ME, OTHER)


def test_an_empty_epoch_of_our_own_gives_way_to_the_leaders_older_data(w):
    create_replica(w)
    one = encode_message_set([b"one"])
    state(w, "follower", 1, leader=OTHER)
    replica_append(w, 0, one, data_epoch=1)
    state(w, "leader", 2)  # led epoch 2 from len(one) and wrote nothing
    state(w, "follower", 3, leader=OTHER)
    assert [e for e, _ in w.books[SLOT].epochs.entries] == [1, 2]
    # the new leader's log goes on in epoch 1 past where our empty epoch 2 began
    assert replica_append(w, len(one), one, epoch=3, data_epoch=1)[0] == ErrorCode.NONE
    assert w.books[SLOT].epochs.entries == ((1, 0),)
    assert replica_append(w, 2 * len(one), one, epoch=3, data_epoch=3)[0] == ErrorCode.NONE
    assert w.books[SLOT].epochs.entries == ((1, 0), (3, 2 * len(one)))


def test_a_commit_left_by_the_slots_last_partition_is_not_adopted(w, clock):
    # what the registrar committed for the partition that had the slot before
    w.isr_commits.commit(SLOT, version=9, isr_bits=0b01, leader_epoch=1)
    create_replica(w)
    state(w, "leader", 1)
    round_(w, clock())
    assert w.table.read(SLOT).isr_ids == (ME, OTHER)


def test_a_commit_of_an_isr_no_longer_wanted_is_adopted_and_corrected(w, clock):
    create_replica(w)
    state(w, "leader", 1)
    data = encode_message_set([b"x"])
    produce(w, 1, data, acks=1)
    clock.ms += LAG_MS + 1
    round_(w, clock.ms)
    assert w.table.read(SLOT).isr_wanted_ids == (ME,)
    follower_fetched(w, len(data), 1)  # back before the registrar wrote the shrink
    round_(w, clock.ms)
    assert w.table.read(SLOT).isr_wanted_ids == (ME, OTHER)
    # the registrar had written the shrink meanwhile: ZooKeeper holds (ME,) now
    w.isr_commits.commit(SLOT, version=1, isr_bits=0b01, leader_epoch=1)
    clock.ms += 1000  # looked at by the ISR check, at least once a second
    round_(w, clock.ms)
    s = w.table.read(SLOT)
    assert (s.isr_ids, s.isr_wanted_ids) == ((ME,), (ME, OTHER))  # the registrar writes it next
