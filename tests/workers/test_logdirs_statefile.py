"""The state file writers of hb-logdirs: one thread per log dir, written in
parallel, bounded by the timeout; a dir whose write fails or hangs is left out,
and is tried again at the next write once its write returned."""

import os
import threading
import time

import pytest

from hostbroker.log import files
from hostbroker.workers.logdirs.statefile import STATE_FILE, StateWriters, read_copies


@pytest.fixture
def dirs(tmp_path):
    paths = {}
    for i in (1, 2, 3):
        d = tmp_path / f"d{i}"
        d.mkdir()
        paths[i] = str(d)
    return paths


def test_every_online_dir_gets_the_same_bytes(dirs):
    writers = StateWriters(10.0)  # (three fsynced writes on a busy machine: well within)
    for i, path in dirs.items():
        writers.set_dir(i, path)
    assert writers.write_bytes(b"one", [1, 2, 3]) == {1, 2, 3}
    assert writers.write_bytes(b"two", [1, 3]) == {1, 3}
    got = {i: open(os.path.join(p, STATE_FILE), "rb").read() for i, p in dirs.items()}
    assert got == {1: b"two", 2: b"one", 3: b"two"}
    # an id without a dir is not written
    assert writers.write_bytes(b"three", [1, 9]) == {1}
    writers.close()


def test_a_dir_that_fails_is_left_out_and_the_others_are_written(dirs, tmp_path):
    writers = StateWriters(10.0)  # (three fsynced writes on a busy machine: well within)
    for i, path in dirs.items():
        writers.set_dir(i, path)
    # a real failure: dir 2's path is gone
    os.rename(dirs[2], str(tmp_path / "gone"))
    assert writers.write_bytes(b"x", [1, 2, 3]) == {1, 3}
    assert writers.error_of(2)
    # it returns: written again at the next write
    os.rename(str(tmp_path / "gone"), dirs[2])
    assert writers.write_bytes(b"y", [1, 2, 3]) == {1, 2, 3}
    assert writers.error_of(2) == ""
    writers.close()


def test_a_hung_dir_costs_one_timeout_and_gets_no_second_write_until_it_returns(dirs):
    # a disk that hangs cannot be made for real: dir 2's write waits on an event
    release = threading.Event()

    def write(path, data):
        if path.startswith(dirs[2]):
            release.wait(10)
        files.write_file_atomically(path, data)

    # (a timeout that an fsync on a busy machine keeps within)
    writers = StateWriters(2.0, write=write)
    for i, path in dirs.items():
        writers.set_dir(i, path)
    started = time.monotonic()
    assert writers.write_bytes(b"a", [1, 2, 3]) == {1, 3}
    assert 2.0 <= time.monotonic() - started < 4.0  # one timeout, not more
    # still stuck: not even tried, so not waited for
    assert writers.write_bytes(b"b", [1, 2, 3]) == {1, 3}
    release.set()
    deadline = time.monotonic() + 5
    while writers.write_bytes(b"c", [1, 2, 3]) != {1, 2, 3}:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert open(os.path.join(dirs[2], STATE_FILE), "rb").read() == b"c"
    writers.close()


def test_copies_are_read_hostile(dirs):
    localstate = pytest.importorskip("hostbroker.replication.localstate")
    os.mkdir(os.path.join(dirs[1], STATE_FILE))  # a directory in its place
    with open(os.path.join(dirs[2], STATE_FILE), "wb") as f:
        f.write(b"{not json")
    copies, missing = read_copies(dirs)
    assert copies == {}
    assert missing[1] and missing[2] and missing[3] == ""
    assert localstate.STATE_MAX_BYTES == 64 * 1024 * 1024


def test_a_hung_dir_s_copy_is_given_up_after_the_bound(dirs, monkeypatch):
    release = threading.Event()
    real = files.read_file

    def read_file(name, *args, **kwargs):
        if name.startswith(dirs[2]):
            release.wait(10)  # a disk that hangs cannot be made for real
        return real(name, *args, **kwargs)

    monkeypatch.setattr(files, "read_file", read_file)
    started = time.monotonic()
    try:
        copies, missing = read_copies(dirs, timeout_s=0.3)
        assert time.monotonic() - started < 5.0
        assert copies == {} and missing[1] == missing[3] == ""
        assert "not read within 0.3 s" in missing[2]
    finally:
        release.set()


def test_a_restarted_hb_logdirs_with_a_hung_dir_starts(tmp_path, monkeypatch):
    from hostbroker.workers.logdirs import admin
    from tests.workers.test_logdirs_worker import Harness, create

    h = Harness(tmp_path)
    try:
        create(h, partitions=1, rf=2)
        h.w.writers.close()
        release = threading.Event()
        real = files.read_file

        def read_file(name, *args, **kwargs):
            if name.startswith(h.paths[2]):
                release.wait(10)
            return real(name, *args, **kwargs)

        monkeypatch.setattr(files, "read_file", read_file)
        monkeypatch.setattr(admin, "ONLINE_LOOK_S", 0.3)
        monkeypatch.setattr("hostbroker.workers.logdirs.worker.ONLINE_LOOK_S", 0.3,
                            raising=False)
        started = time.monotonic()
        w = h.start()
        assert time.monotonic() - started < 5.0
        assert 2 in w.unidentified and 3 in w.blocked  # kept out, as an unreadable copy
    finally:
        release.set()
        h.close()
