"""Leases of broker runs (``hostbroker/shm/region.py``): a sweep removes the
segments of a run whose lease nobody holds, and never those of a run whose
lease a live process (or any process it forked) holds."""

from __future__ import annotations

import itertools
import os
import signal
import time

import pytest

from hostbroker.shm.region import (LEASE_SUFFIX, SHM_DIR, SharedRegion, release_lease,
                                   remove_stale, sweep_dead_runs, take_lease)

_runs = itertools.count()


@pytest.fixture
def token():
    name = f"hb-lease{os.getpid()}x{next(_runs)}"
    yield name
    remove_stale("/" + name + "-")
    try:
        os.unlink(os.path.join(SHM_DIR, name + LEASE_SUFFIX))
    except FileNotFoundError:
        pass


def segments(token: str) -> list[str]:
    return sorted(e for e in os.listdir(SHM_DIR) if e.startswith(token + "-"))


def run_in_child(token: str, hold: bool) -> int:
    """A forked 'broker run': takes the lease, makes a segment, then waits
    (hold) or dies at once, leaving both behind."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            take_lease(token)
            SharedRegion.create(f"/{token}-ring-0", 4096)
            os.write(write, b"x")
            if hold:
                time.sleep(60)
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"x"
    os.close(read)
    return pid


def test_a_dead_runs_segments_and_lease_are_swept(token):
    pid = run_in_child(token, hold=False)
    os.waitpid(pid, 0)
    assert segments(token) == [f"{token}-ring-0"]
    removed = []  # dead runs of other tests' brokers may be swept with it
    assert token in sweep_dead_runs(removed.append)
    assert removed.count(token) == 1 and segments(token) == []
    assert not os.path.lexists(os.path.join(SHM_DIR, token + LEASE_SUFFIX))


def test_a_live_runs_segments_are_never_swept(token):
    pid = run_in_child(token, hold=True)
    try:
        assert token not in sweep_dead_runs()
        assert segments(token) == [f"{token}-ring-0"]
        with pytest.raises(TimeoutError):
            take_lease(token, timeout=0.2)  # a second run of the same token waits
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert token in sweep_dead_runs()


def test_a_forked_child_keeps_the_lease_after_its_parent_dies(token):
    """Workers share the supervisor's lease: an orphaned worker still maps the
    segments, so they stay."""
    fd = take_lease(token)
    SharedRegion.create(f"/{token}-ring-0", 4096).close()
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    os.close(fd)  # the 'supervisor' is gone; its worker is not
    try:
        assert token not in sweep_dead_runs() and segments(token)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert token in sweep_dead_runs() and not segments(token)


def test_a_lease_that_is_a_link_or_another_users_is_ignored(token, tmp_path):
    SharedRegion.create(f"/{token}-ring-0", 4096).close()
    lease = os.path.join(SHM_DIR, token + LEASE_SUFFIX)
    target = tmp_path / "target"
    target.write_bytes(b"")
    os.symlink(target, lease)
    assert token not in sweep_dead_runs() and segments(token)
    os.unlink(lease)
    if os.geteuid() == 0:
        with open(lease, "wb"):
            pass
        os.chown(lease, 65534, 65534)
        assert token not in sweep_dead_runs() and segments(token)
        # a run of ours replaces such a file rather than trust it
        fd = take_lease(token)
        assert os.stat(lease).st_uid == 0
        release_lease(token, fd)
        assert not os.path.lexists(lease)


def test_a_lease_not_named_like_a_brokers_is_never_swept():
    """Another program's ``<name>.lease`` in /dev/shm, ours and unlocked, does
    not make a sweep remove its ``/<name>-...`` segments."""
    name = f"other{os.getpid()}x{next(_runs)}"
    lease = os.path.join(SHM_DIR, name + LEASE_SUFFIX)
    with open(lease, "wb"):
        pass
    SharedRegion.create(f"/{name}-data", 4096).close()
    try:
        assert name not in sweep_dead_runs()
        assert segments(name) == [f"{name}-data"] and os.path.exists(lease)
    finally:
        remove_stale(f"/{name}-")
        os.unlink(lease)


def test_a_dead_run_that_cannot_be_cleared_is_reported_and_kept(token):
    pid = run_in_child(token, hold=False)
    os.waitpid(pid, 0)

    def not_ours(dead):
        # what attaching another user's semaphore raises: a fake, as the
        # test cannot be another user
        raise PermissionError(f"the semaphore of {dead} is not ours")

    errors = []
    assert token not in sweep_dead_runs(not_ours, lambda t, why: errors.append((t, why)))
    assert errors == [(token, f"the semaphore of {token} is not ours")]
    assert os.path.exists(os.path.join(SHM_DIR, token + LEASE_SUFFIX))  # tried again next time
    assert token in sweep_dead_runs() and segments(token) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a second user")
def test_a_segment_not_ours_is_a_permission_error(token):
    """Another user's segment under our name: remove_stale says so as an OSError
    (the supervisor's one line), never posix_ipc's own exception."""
    SharedRegion.create(f"/{token}-ring-0", 4096).close()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            try:
                remove_stale(f"/{token}-")
                os.write(write, b"removed")
            except PermissionError as e:
                os.write(write, str(e).encode())
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                os.write(write, type(e).__name__.encode())
        finally:
            os._exit(0)
    os.close(write)
    said = os.read(read, 1024).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert said == f"{SHM_DIR}/{token}-ring-0 is not ours to remove"
    assert segments(token) == [f"{token}-ring-0"]
