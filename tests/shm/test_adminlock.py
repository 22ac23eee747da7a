"""The admin lock: excludes other processes, is found by a broker's token,
and is freed by the kernel when its holder is killed."""

import os
import time

import pytest

from hostbroker.shm.adminlock import AdminLock
from tests.shm.procutil import fork, kill, wait_ok


@pytest.fixture
def lock():
    lock = AdminLock.create(timeout=2.0)
    yield lock
    lock.remove()


def test_admin_lock_excludes_other_processes(lock):
    def try_to_take(key):
        other = AdminLock.attach(key, timeout=0.05)
        with pytest.raises(TimeoutError):
            other.acquire()

    with lock:
        wait_ok(fork(try_to_take, lock.key))
    with AdminLock.attach(lock.key):
        pass
    with pytest.raises(RuntimeError):
        lock.release()


def test_admin_lock_keyed_by_a_broker_token():
    token = f"hb-test{os.getpid()}"
    assert not AdminLock.remove_stale(token)
    lock = AdminLock.create(token)
    try:
        assert lock.key == AdminLock.token_key(token)
        with pytest.raises(FileExistsError):
            AdminLock.create(token)
        with AdminLock.attach(token):
            pass
    except BaseException:
        lock.remove()
        raise
    assert AdminLock.remove_stale(token)  # as after a crash
    with pytest.raises(FileNotFoundError):
        AdminLock.attach(token)


def test_admin_lock_is_freed_when_its_holder_is_killed(lock):
    read_end, write_end = os.pipe()

    def hold(key):
        AdminLock.attach(key).acquire()
        os.write(write_end, b"x")
        time.sleep(60)

    pid = fork(hold, lock.key)
    assert os.read(read_end, 1) == b"x"
    with pytest.raises(TimeoutError):
        lock.acquire(timeout=0.05)
    kill(pid)
    lock.acquire(timeout=2)
    lock.release()
    os.close(read_end)
    os.close(write_end)
