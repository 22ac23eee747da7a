"""Doorbells rung only for sleepers (Waker) and the sleeping side (Sleeper)."""

import mmap
import os
import random
import selectors
import time

from hostbroker.shm.doorbell import Doorbell, Sleeper, Waker
from hostbroker.shm.procs import ProcessBoard
from hostbroker.shm.ring import MIN_CAPACITY, Ring
from tests.shm.procutil import fork, wait_ok


def shared_flags(words: int = 4):
    """u32 words shared with forked children (what the process board gives workers)."""
    return memoryview(mmap.mmap(-1, 4 * words)).cast("I")


def test_an_awake_peer_is_not_rung_a_sleeping_one_is():
    bell, flags = Doorbell(), shared_flags()
    try:
        waker = Waker(bell, flags, 2)
        waker.wake()
        assert (bell.drain(), waker.rung, waker.skipped) == (0, 0, 1)
        flags[2] = 1
        waker.wake()
        assert (bell.drain(), waker.rung, waker.skipped) == (1, 1, 1)
        waker.wake(needed=lambda: False)  # asleep, but not waiting for this
        assert (bell.drain(), waker.rung, waker.skipped) == (0, 1, 2)
        flags[2] = 0
        waker.ring()  # space freed, stop, restart: rung whatever the peer does
        assert (bell.drain(), waker.rung) == (1, 2)
    finally:
        bell.close()


def test_a_sleeper_with_work_waiting_does_not_sleep_and_clears_its_flag():
    flags = shared_flags()
    seen = []

    def wait(timeout):
        seen.append((timeout, flags[1]))
        return []

    sleeper = Sleeper(flags, 1, ready=lambda: True)
    sleeper.sleep(wait, 5.0)
    assert seen == [(0, 1)]  # flagged while it looked, then no wait at all
    assert flags[1] == 0
    sleeper = Sleeper(flags, 1, ready=lambda: False)
    sleeper.sleep(wait, 5.0)
    assert seen[-1] == (5.0, 1)
    assert flags[1] == 0
    assert sleeper.wakeups == 0  # the wait returned no event: a timeout


def test_spin_finds_work_that_comes_within_its_bound_and_gives_up_after_it():
    flags = shared_flags()
    due = time.monotonic_ns() + 2_000_000
    sleeper = Sleeper(flags, 0, ready=lambda: time.monotonic_ns() >= due, spin_ns=200_000_000)
    assert sleeper.spin()
    assert sleeper.spin_hits == 1
    idle = Sleeper(flags, 0, ready=lambda: False, spin_ns=3_000_000)
    started = time.monotonic_ns()
    assert not idle.spin()
    assert 3_000_000 <= time.monotonic_ns() - started < 500_000_000
    polled = Sleeper(flags, 0, ready=lambda: False, spin_ns=200_000_000)
    assert polled.spin(poll=lambda: True)
    assert polled.spin_hits == 1


def test_no_record_is_left_unseen_by_a_sleeping_consumer(created):
    """Producer and consumer race through the handshake thousands of times; a
    lost wake-up would leave the consumer asleep for its whole 3 s timeout."""
    ring = created(Ring, "ring", MIN_CAPACITY)
    flags = shared_flags()
    bell = Doorbell()
    rounds = 3000
    worst = shared_flags(1)

    def consumer():
        sleeper = Sleeper(flags, 0, ring.has_unread)
        selector = selectors.DefaultSelector()
        selector.register(bell, selectors.EVENT_READ)
        got = 0
        while got < rounds:
            started = time.monotonic_ns()
            sleeper.sleep(selector.select, 3.0)
            worst[0] = max(worst[0], (time.monotonic_ns() - started) // 1000)
            bell.drain()
            got += len(ring.read())
            ring.release()

    pid = fork(consumer)
    try:
        waker = Waker(bell, flags, 0)
        rng = random.Random(7)
        started = time.monotonic()
        for i in range(rounds):
            assert ring.try_put(i.to_bytes(4, "little"))
            ring.publish()
            waker.wake()
            while ring.pending_bytes():  # until the consumer took it
                if rng.random() < 0.5:
                    os.sched_yield()
            if rng.random() < 0.1:
                time.sleep(rng.random() / 5000)  # let the consumer fall asleep sometimes
        wait_ok(pid, timeout=30)
        elapsed = time.monotonic() - started
    finally:
        bell.close()
    assert worst[0] < 2_500_000, f"a sleep of {worst[0]} us: a wake-up was lost"
    assert elapsed < 30
    assert waker.rung > 0  # the consumer did sleep (whether it was ever awake is up to timing)


def test_the_sleeping_flag_lives_in_its_own_board_slot(created):
    board = created(ProcessBoard, "board", 3)
    flags = board.flags
    flags[board.sleeping_index(1)] = 1
    board.set_worker(1, kind=2, index=0, pid=os.getpid(), epoch=1)
    assert flags[board.sleeping_index(1)] == 0  # a (re)started worker starts awake
    flags[board.sleeping_index(1)] = 1
    assert [flags[board.sleeping_index(i)] for i in range(3)] == [0, 1, 0]
    board.heartbeat(1, 123)
    board.add(1, 15, 7)
    board.set_state(1, 3)
    slot = board.read(1)
    assert (slot.state, slot.kind, slot.pid, slot.epoch, slot.heartbeat_ns, slot.counters[15]) == \
        (3, 2, os.getpid(), 1, 123, 7)
    assert flags[board.sleeping_index(1)] == 1  # untouched by the slot's other fields
