"""Forked helper processes for the shm tests."""

from __future__ import annotations

import os
import signal
import time
import traceback

import pytest


def fork(fn, *args) -> int:
    """Run ``fn(*args)`` in a forked child; it exits 0 if fn returns, 1 if it raises."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn(*args)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait_ok(pid: int, timeout: float = 10.0) -> None:
    """Reap ``pid`` and fail the test unless it exited 0 within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, "child process failed"
            return
        if time.monotonic() > deadline:
            kill(pid)
            pytest.fail(f"child {pid} did not finish in {timeout} s")
        time.sleep(0.002)


def kill(pid: int) -> None:
    """SIGKILL ``pid`` and reap it."""
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.001)
