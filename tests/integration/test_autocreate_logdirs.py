"""Auto-creation with ``default.replication.factor`` 2 on a real standalone broker of two
log dirs, one of them a tmpfs pulled away (``umount -l``) or full before the first produce.

With one usable dir the produce that would create the topic is answered
INVALID_REPLICATION_FACTOR over the socket (not retriable: the producer gives up at
once, nothing waits), and nothing is made half-way: no topic in METADATA, no slot, no
partition dir, no entry in the replication state file. Once a disk is back there (a
new tmpfs, taken with ``logdirs online``) the same produce creates the topic across
both dirs and is acknowledged by both replicas (acks=-1)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set, iter_messages
from tests.integration.broker import Broker
from tests.integration.cli import hostbroker
from tests.logdirs.support import DIR_OFFLINE, DIR_ONLINE, dir_states, poll, replica_slots
from tests.mounts import fill, mount_tmpfs, mounted, unmount

TOPIC = "auto"


@pytest.fixture
def two_dirs(tmp_path):
    """A broker on ``d0`` (a plain dir) and ``d1`` (a tmpfs), auto-creating with
    replication factor 2; stopped, and every mount on ``d1`` undone, after the test."""
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    os.mkdir(dirs[0])
    mount_tmpfs(dirs[1], "8m")
    broker = Broker(tmp_path, **{"log.dirs": ",".join(dirs), "num.processors": 1,
                                 "num.handlers": 2, "default.replication.factor": 2})
    broker.dirs = dirs
    try:
        broker.start()
        yield broker
    finally:
        try:
            broker.finish()
        finally:
            for _ in range(3):  # (a tmpfs mounted again over a pulled one)
                unmount(dirs[1])
            assert not mounted(dirs[1]), f"{dirs[1]} still mounted"


def _produce(broker, value: bytes):
    with broker.client() as c:
        return c.produce(TOPIC, 0, encode_message_set([value]), acks=-1,
                         raise_on_error=False)


def _states(broker, path: str) -> set[int]:
    """METADATA v2's states of the log dirs at ``path``: a new disk taken there has a
    new id, and the old id may still be listed there as missing."""
    with broker.client() as c:
        return {d.state for d in c.metadata_v2([]).log_dirs if d.path == path}


def _made_anything(broker) -> list[str]:
    """What the broker made of the topic: its METADATA entry, slots, partition dirs,
    state file entries (empty: nothing)."""
    made = []
    with broker.client() as c:
        if TOPIC in [t.topic for t in c.metadata().topics]:
            made.append("a topic in METADATA")
    if replica_slots(broker, TOPIC, 0):
        made.append("a partition table slot")
    for d in broker.dirs:
        made += [os.path.join(d, n) for n in os.listdir(d) if n.startswith(TOPIC)]
        state = os.path.join(d, "log-dirs-state")
        if os.path.exists(state):
            with open(state, "rb") as f:
                if f'"{TOPIC}"'.encode() in f.read():
                    made.append(f"{state} names it")
    return made


def test_auto_create_with_too_few_usable_dirs_is_refused_then_works(two_dirs):
    broker = two_dirs
    small = broker.dirs[1]
    poll(lambda: list(dir_states(broker).values()) == [DIR_ONLINE, DIR_ONLINE], 15,
         "both dirs online")
    subprocess.run(["umount", "-l", small], check=True, timeout=30)
    poll(lambda: _states(broker, small) == {DIR_OFFLINE}, 15,
         "the pulled dir offline (the writers' probe)")

    for n in range(3):  # each handler, and again: the same answer, nothing made
        answer = _produce(broker, f"refused-{n}".encode())
        assert answer.error_code == ErrorCode.INVALID_REPLICATION_FACTOR, answer
        assert _made_anything(broker) == []
    assert "replication factor 2 needs 2 usable log dirs; the broker has 1 (1 offline) " \
           "(default.replication.factor)" in broker.log()

    # a new disk where the pulled one was, taken back while the broker runs
    mount_tmpfs(small, "8m")
    back = hostbroker("logdirs", "online", "--bootstrap", broker.unix, "--log-dir", small)
    assert back.returncode == 0, back.stderr.decode()
    poll(lambda: DIR_ONLINE in _states(broker, small), 15, "the new disk online")

    first = _produce(broker, b"first")
    # (being created: retriable, or already there)
    assert first.error_code in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NONE), first
    poll(lambda: _produce(broker, b"kept").error_code == ErrorCode.NONE, 15,
         "the auto-created topic acknowledging acks=-1")
    slots = replica_slots(broker, TOPIC, 0)
    assert sorted(s.owner for _, s in slots) == [0, 1]  # one replica on each dir
    assert all(os.path.isdir(os.path.join(d, f"{TOPIC}_0")) for d in broker.dirs)
    with broker.client() as c:
        got = c.fetch(TOPIC, 0, 0, 1 << 16)
    values = [bytes(m.payload) for m in iter_messages(bytes(got.message_set), 0)]
    assert b"kept" in values and not [v for v in values if v.startswith(b"refused")]


def _full_and_asked(broker) -> set:
    """Fill the tmpfs (``fill``): its writer has nothing to write there, so only the
    state file write finds it (ENOSPC). Then produce to the unknown topic for 3 s (the
    handler asks hb-logdirs again once a second); the codes answered."""
    poll(lambda: list(dir_states(broker).values()) == [DIR_ONLINE, DIR_ONLINE], 15,
         "both dirs online")
    broker.filler = fill(broker.dirs[1])
    seen = set()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        seen.add(_produce(broker, b"refused").error_code)
        time.sleep(0.1)
    return seen


def test_auto_create_with_a_full_dir_makes_nothing_half_way(two_dirs):
    broker = two_dirs
    seen = _full_and_asked(broker)
    assert seen <= {ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.INVALID_REPLICATION_FACTOR}, seen
    # the state file copy on the dir that took the create's write names it no more
    assert _made_anything(broker) == []


def test_auto_create_with_a_full_dir_is_refused_then_works(two_dirs):
    broker = two_dirs
    assert ErrorCode.INVALID_REPLICATION_FACTOR in _full_and_asked(broker)
    # a dir that cannot take the state file holds no replica: offline for them
    assert list(dir_states(broker).values()) == [DIR_ONLINE, DIR_OFFLINE]
    os.remove(broker.filler)  # the write is tried again (logdirs.state.retry.ms)
    poll(lambda: list(dir_states(broker).values()) == [DIR_ONLINE, DIR_ONLINE], 15,
         "the dir online again once its state file is written")
    poll(lambda: _produce(broker, b"kept").error_code == ErrorCode.NONE, 15,
         "the auto-created topic acknowledging acks=-1 once the space is back")
