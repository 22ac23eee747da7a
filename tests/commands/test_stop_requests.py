"""A stop (SIGTERM, Ctrl-C) of ``mirror`` (commands.StopRequests): raised only
inside a wait, never in the middle of the commit between two waits; one that
came meanwhile is raised as the next wait begins. Real signals, sent to this
process (pytest runs tests in its main thread)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from hostbroker.commands import Stopped, StopRequests


@pytest.fixture
def stops():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield StopRequests()
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_a_stop_outside_a_wait_is_kept_for_the_next_wait(stops):
    finished = False
    os.kill(os.getpid(), signal.SIGTERM)  # "in the middle of a commit"
    finished = True
    assert finished and stops.requested
    with pytest.raises(Stopped):
        with stops.waiting():
            raise AssertionError("the wait must not begin")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_inside_a_wait_is_raised_there(stops, signum):
    with pytest.raises(Stopped):
        with stops.waiting():
            os.kill(os.getpid(), signum)
            time.sleep(5)  # (a wait the signal cuts short)
            raise AssertionError("not stopped")


def test_only_the_first_stop_counts(stops):
    with pytest.raises(Stopped):
        with stops.waiting():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    os.kill(os.getpid(), signal.SIGTERM)  # a second one, during the final commit
    assert stops.requested
