"""A worker's liveness, in one process: the heartbeat thread's rule on a real
process board with a fake clock, and the parent-death request made right
after a fork (the supervisor-level behaviour is in
tests/integration/test_supervision.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from hostbroker.config import Config
from hostbroker.shm.procs import ProcessBoard
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers.base import EXIT_ORPHANED, die_with_parent
from hostbroker.workers.handler import HandlerWorker
from hostbroker.workers.plan import BrokerPlan

STALL_MS = 60000


@pytest.fixture
def worker():
    config = Config.build(overrides=[f"worker.stall.timeout.ms={STALL_MS}"])
    plan = BrokerPlan.from_config(config)
    token = f"hb{os.getpid()}"
    board = ProcessBoard.create(region_name(token, "procs", 0), plan.worker_count)
    w = HandlerWorker(plan, 0)
    w.board = board
    yield w
    remove_stale(broker_prefix(token))


def test_the_thread_beats_while_the_loop_comes_round(worker):
    loop_ns = 1_000_000_000_000
    worker._loop_ns = loop_ns
    assert worker.beat_if_alive(loop_ns + 5)
    assert worker.board.heartbeat_ns(worker.slot) == loop_ns + 5
    last = loop_ns + STALL_MS * 1_000_000
    assert worker.beat_if_alive(last)
    assert worker.board.heartbeat_ns(worker.slot) == last


def test_the_thread_stops_beating_when_the_loop_stalls(worker):
    loop_ns = 1_000_000_000_000
    worker._loop_ns = loop_ns
    worker.beat_if_alive(loop_ns + 1)
    assert not worker.beat_if_alive(loop_ns + STALL_MS * 1_000_000 + 1)
    assert worker.board.heartbeat_ns(worker.slot) == loop_ns + 1
    worker._loop_ns = loop_ns + STALL_MS * 1_000_000 + 2  # the loop came round again
    assert worker.beat_if_alive(worker._loop_ns)


def _fork(fn) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    return pid


def _wait(pid: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} still running after {timeout} s")


def test_a_child_whose_parent_already_died_leaves_at_once():
    # the race: the parent died between fork and prctl (its pid is no longer ours)
    assert _wait(_fork(lambda: die_with_parent(os.getppid() + 1))) == EXIT_ORPHANED


def test_a_child_gets_sigterm_when_its_parent_dies():
    read, write = os.pipe()

    def middle() -> None:  # the supervisor's part: fork, then die
        parent = os.getpid()
        if os.fork() == 0:
            die_with_parent(parent)
            os.write(write, b"ready")
            time.sleep(30)  # ended by SIGTERM long before
            os.write(write, b"not killed")
            os._exit(0)
        os.read(read, 5)

    _wait(_fork(middle))
    os.close(write)
    deadline = time.monotonic() + 5
    # the grandchild holds the pipe's write end until it ends
    with os.fdopen(read, "rb") as r:
        assert r.read() == b"", "the child outlived its parent"
    assert time.monotonic() < deadline
