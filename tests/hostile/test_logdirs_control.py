"""What hb-logdirs reads from the log dirs is hostile: state file copies that are
garbage, links, directories or claim a newer seq than the good ones; log dir id
files copied between dirs or replaced by a directory. None of them crashes a
worker or elects from a copy that was not whole; two dirs holding one id
refuse the start in one line."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from hostbroker.log.dirids import read_dir_id, write_dir_id
from hostbroker.workers.logdirs.model import Document, Part
from hostbroker.workers.logdirs.statefile import STATE_FILE, read_copies
from tests.integration.broker import Broker, serve_args
from tests.integration.wire_helpers import stop_or_kill


def good(seq: int, online=(1, 2, 3)) -> bytes:
    return Document(seq=seq, online=list(online), dirs={},
                    configs={"t": {}}, parts={("t", 0): Part([1, 2], 1, 0, [1, 2])}).encode()


def test_fifty_garbage_copies_never_win_over_a_good_one(tmp_path, seed):
    rnd = random.Random(seed)
    dirs = {i: str(tmp_path / f"d{i}") for i in (1, 2, 3)}
    for path in dirs.values():
        os.mkdir(path)
    for path in dirs.values():
        with open(os.path.join(path, STATE_FILE), "wb") as f:
            f.write(good(5))
    base = good(99)
    for _ in range(50):
        data = bytearray(base)
        for _ in range(rnd.randint(1, 8)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        data = bytes(data[:rnd.randint(0, len(data))]) if rnd.random() < 0.3 else bytes(data)
        with open(os.path.join(dirs[2], STATE_FILE), "wb") as f:
            f.write(data)
        copies, missing = read_copies(dirs)
        assert copies[1].seq == copies[3].seq == 5
        # a flip that left a whole document of the right shape is a copy; anything
        # else is refused with a line naming the file, never an exception
        assert (2 in copies) != bool(missing.get(2))
        if 2 not in copies:
            assert STATE_FILE in missing[2]


def test_a_link_or_a_directory_in_place_of_a_copy_is_not_followed(tmp_path):
    dirs = {i: str(tmp_path / f"d{i}") for i in (1, 2)}
    for path in dirs.values():
        os.mkdir(path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(good(50))
    os.symlink(str(elsewhere), os.path.join(dirs[1], STATE_FILE))
    os.mkdir(os.path.join(dirs[2], STATE_FILE))
    copies, missing = read_copies(dirs)
    assert copies == {} and missing[1] and missing[2]


def test_two_dirs_holding_one_id_refuse_the_start(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write_dir_id(str(a), 3)
    write_dir_id(str(b), 3)  # a copied dir
    args = serve_args(tmp_path, {"log.dirs": f"{a},{b}"})
    args[args.index(f"log.dirs={tmp_path}/logs")] = f"log.dirs={a},{b}"
    done = subprocess.run([sys.executable, "-m", "hostbroker", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 78
    assert f"log.dirs: {a} and {b} both hold log dir id 3 (a copied dir?)" in done.stderr


def test_an_id_file_that_is_a_directory_starts_that_dir_offline_and_the_rest_serve(tmp_path):
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    os.mkdir(dirs[1] / "log-dir-id")
    broker = Broker(tmp_path, log_dirs=",".join(str(d) for d in dirs))
    try:
        broker.start()
        with broker.client() as client:
            client.create_topic("still", 2)
        ids = [read_dir_id(str(dirs[0])), read_dir_id(str(dirs[2]))]
        assert sorted(ids) == [1, 2]
        assert "starts offline" in open(broker.log_path).read()
    finally:
        stop_or_kill(broker)


def test_a_one_dir_broker_reads_no_id_file_and_runs_no_probe(tmp_path):
    """Without hb-logdirs nothing would open a dir again: a one-dir broker
    neither reads nor writes ``log-dir-id``, and a dir the probe would find
    changed (its id file replaced) keeps serving."""
    import time

    from hostbroker.log.message import encode_message_set

    d = tmp_path / "only"
    d.mkdir()
    (d / "log-dir-id").write_bytes(b"garbage\n")  # would start it offline with hb-logdirs
    broker = Broker(tmp_path, log_dirs=str(d), **{"log.dir.check.interval.ms": 50})
    try:
        broker.start()
        with broker.client() as client:
            client.create_topic("one", 1)
            client.produce("one", 0, encode_message_set([b"a"]), acks=1)
            (d / "log-dir-id").write_bytes(b"7\n")  # another id, as a replaced disk's
            # 40 probe intervals, and the writer busy in at least 20 of them (an
            # acks=1 produce is a round of its loop): however slow the machine, a
            # probe would have come due and run
            deadline = time.monotonic() + 2.0
            rounds = 0
            while time.monotonic() < deadline or rounds < 20:
                client.produce("one", 0, encode_message_set([b"b"]), acks=1)
                rounds += 1
                time.sleep(0.05)
            assert client.fetch("one", 0, 0, 1 << 20).error_code == 0
        assert (d / "log-dir-id").read_bytes() == b"7\n"
        log = open(broker.log_path).read()
        assert "offline" not in log and "removed or replaced" not in log
    finally:
        stop_or_kill(broker)


def test_an_immutable_mount_point_refuses_the_start_even_as_root(tmp_path):
    """docs/runbook-disk.md, "A disk not mounted at start": a mount point made
    immutable (``chattr +i``) while its disk is not mounted keeps the broker
    from starting on it, run as root too (a root-owned mode 755 dir would not:
    root may write it)."""
    if os.geteuid() != 0:
        pytest.skip("the case is a broker run as root")
    a, b = tmp_path / "d1", tmp_path / "d2"
    a.mkdir()
    b.mkdir()
    made = subprocess.run(["chattr", "+i", str(b)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i refused here: {made.stderr.strip()}")
    try:
        args = serve_args(tmp_path, {"log.dirs": f"{a},{b}"})
        args[args.index(f"log.dirs={tmp_path}/logs")] = f"log.dirs={a},{b}"
        done = subprocess.run([sys.executable, "-m", "hostbroker", *args], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 78, done.stderr
        assert f"log.dirs: cannot use {b}: {b} is not writable" in done.stderr
        assert os.listdir(b) == []
    finally:
        subprocess.run(["chattr", "-i", str(b)], check=True)
