"""Standing cases for files on disk and shared memory (issue 34, "Files: no
symlink is followed, nothing is world-readable"), against real ``hostbroker
serve`` processes run by this user (root, where these attacks matter):

- links planted at every file a broker writes or reads in its log dir
  (temp files of atomic writes, the locks, the clean-shutdown marker, the
  recovery checkpoint, the consumer offsets store and its compaction file,
  a segment, a partition.json): the files they point to, outside the log
  dir, are unchanged after a start, produce, shutdown and restart;
- what the broker creates is not readable by other users (``log.umask``);
- a log dir others may write is refused at start, with one line;
- a broker killed whole leaves no shared memory or semaphore behind once
  another broker starts, and a live broker's are never touched.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys

import pytest

from hostbroker.config import Config
from hostbroker.errors import ErrorCode, ExitStatus
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.region import LEASE_SUFFIX, SHM_DIR
from hostbroker.workers.plan import shm_token
from tests.integration.broker import Broker, serve_args
from tests.integration.wire_helpers import stop_or_kill

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the attacks are on a broker run as root")

PRECIOUS = b"precious: not the broker's to write\n"


@pytest.fixture
def brokers(tmp_path):
    made: list[Broker] = []

    def make(name: str, **settings) -> Broker:
        broker = Broker(tmp_path / name, num_processors=1, num_handlers=1, **settings)
        os.makedirs(broker.root, exist_ok=True)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        stop_or_kill(broker)
        broker.remove_leftovers()


def produce(broker: Broker, topic: str, payloads: list[bytes]) -> None:
    with broker.client() as client:
        client.produce(topic, 0, encode_message_set(payloads), acks=-1)


def fetch_all(broker: Broker, topic: str) -> list[bytes]:
    with broker.client() as client:
        answer = client.fetch(topic, 0, 0, 1 << 20)
    return [m.payload for m in iter_messages(answer.message_set, 0)]


def test_no_link_in_a_log_dir_is_followed(brokers, tmp_path):
    broker = brokers("linked")
    logs = broker.settings["log.dirs"]
    broker.start()
    with broker.client() as client:
        for topic in ("seg", "meta", "kept"):
            client.create_topic(topic, 1)
            produce(broker, topic, [topic.encode()] * 3)
        assert client.offset_commit("g", [("kept", 0, 3, "")]) is not None
    assert broker.stop() == 0

    outside = tmp_path / "outside"
    outside.mkdir()
    victims = {}

    def link(path: str, name: str) -> None:
        target = outside / name
        target.write_bytes(PRECIOUS)
        victims[name] = target
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(target, path)

    # the temp files of atomic writes, and the files themselves
    for name in ("recovery-point-offset-checkpoint", ".clean_shutdown"):
        link(os.path.join(logs, name + ".tmp"), name + ".tmp")
    link(os.path.join(logs, ".clean_shutdown"), "clean_shutdown")
    link(os.path.join(logs, ".broker.lock"), "broker.lock")
    link(os.path.join(logs, ".lock"), "lock")
    link(os.path.join(logs, "__consumer_offsets.log"), "consumer_offsets")
    link(os.path.join(logs, "__consumer_offsets.log.compact"), "consumer_offsets.compact")
    link(os.path.join(logs, "seg_0", "00000000000000000000.kafka"), "segment")
    link(os.path.join(logs, "seg_0", "00000000000000000003.kafka"), "later segment")
    # a link to a valid partition file is not read either
    meta = os.path.join(logs, "meta_0", "partition.json")
    valid = outside / "partition.json"
    valid.write_bytes(open(meta, "rb").read())
    os.unlink(meta)
    os.symlink(valid, meta)
    link(os.path.join(logs, "kept_0", "partition.json.tmp"), "partition.json.tmp")

    for _ in range(2):  # start, produce, shut down; and once more
        broker.start()
        produce(broker, "kept", [b"after"])
        produce(broker, "fresh", [b"new"])
        with broker.client() as client:
            assert client.offset_commit("g", [("kept", 0, 4, "")]) is not None
            for topic in ("seg", "meta"):  # offline, not followed
                answer = client.fetch(topic, 0, 0, 1024, raise_on_error=False)
                assert answer.error_code == ErrorCode.STORAGE_ERROR, topic
        assert fetch_all(broker, "kept")[:3] == [b"kept"] * 3
        assert broker.stop() == 0
    for name, target in victims.items():
        assert target.read_bytes() == PRECIOUS, f"written through the link at {name}"
    log = broker.log()
    assert "seg_0" in log and "symbolic link" in log
    assert "meta_0" in log


def test_nothing_the_broker_creates_is_readable_by_others(brokers):
    broker = brokers("modes")
    broker.start()
    with broker.client() as client:
        client.create_topic("t", 2)
        produce(broker, "t", [b"secret"])
        client.offset_commit("g", [("t", 0, 1, "")])
    assert broker.stop() == 0
    logs = broker.settings["log.dirs"]
    seen = 0
    for root, dirs, names in os.walk(logs):
        for name in dirs:
            mode = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
            assert mode == 0o750, (os.path.join(root, name), oct(mode))
        for name in names:
            mode = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
            assert mode == 0o640, (os.path.join(root, name), oct(mode))
            seen += 1
    assert seen >= 6
    assert stat.S_IMODE(os.stat(logs).st_mode) == 0o750


@pytest.mark.parametrize("where", ["log dir", "parent"])
def test_a_log_dir_others_may_write_is_refused_as_root(tmp_path, where):
    parent = tmp_path / "shared"
    logs = parent / "logs"
    logs.mkdir(parents=True)
    os.chmod(logs if where == "log dir" else parent, 0o777)
    proc = subprocess.Popen([sys.executable, "-m", "hostbroker",
                             *serve_args(tmp_path, {"log.dirs": str(logs)})],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it serves: stop it the way a user would
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        pytest.fail(f"a broker started on a log dir others may write:\n{stderr}")
    assert proc.returncode == ExitStatus.REFUSED, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing" in lines[0] and "0777" in lines[0], lines
    assert os.listdir(logs) == []  # nothing created in it


def _shm_of(broker: Broker) -> tuple[str, list[str]]:
    token = shm_token(Config.build(overrides=[f"log.dirs={broker.settings['log.dirs']}"]))
    return token, sorted(e for e in os.listdir(SHM_DIR) if e.startswith(token + "-"))


def _semaphore_exists(token: str) -> bool:
    try:
        AdminLock.attach(token)
    except FileNotFoundError:
        return False
    return True


def test_a_broker_killed_whole_leaves_nothing_once_another_starts(brokers):
    dead, live, starting = brokers("dead"), brokers("live"), brokers("starting")
    dead.start()
    live.start()
    dead_token, dead_segments = _shm_of(dead)
    live_token, live_segments = _shm_of(live)
    assert dead_segments and live_segments
    dead.kill_tree()  # supervisor and workers, SIGKILL by PID
    assert _shm_of(dead)[1] == dead_segments and _semaphore_exists(dead_token)

    starting.start()  # on other log dirs
    assert _shm_of(dead)[1] == []
    assert not _semaphore_exists(dead_token)
    assert not os.path.lexists(os.path.join(SHM_DIR, dead_token + LEASE_SUFFIX))
    # the live broker keeps everything, and serves
    assert _shm_of(live)[1] == live_segments and _semaphore_exists(live_token)
    assert os.path.exists(os.path.join(SHM_DIR, live_token + LEASE_SUFFIX))
    with live.client() as client:
        client.create_topic("still", 1)
    produce(live, "still", [b"here"])
    assert fetch_all(live, "still") == [b"here"]
    assert live.stop() == 0
    assert _shm_of(live)[1] == []  # a clean stop leaves nothing
    assert not os.path.lexists(os.path.join(SHM_DIR, live_token + LEASE_SUFFIX))


def test_a_planted_lease_is_not_trusted(brokers):
    """A lease file that is a link, or another user's, is ignored by a sweep."""
    victim = brokers("victim")
    victim.start()
    token, segments = _shm_of(victim)
    lease = os.path.join(SHM_DIR, token + LEASE_SUFFIX)
    # replace the live broker's lease path by an unlocked file of another user:
    # a sweep must not take it for a dead run
    os.rename(lease, lease + ".held")
    try:
        with open(lease, "wb"):
            pass
        os.chown(lease, 65534, 65534)
        starting = brokers("starting")
        starting.start()
        assert _shm_of(victim)[1] == segments
        assert starting.stop() == 0
    finally:
        os.unlink(lease)
        os.rename(lease + ".held", lease)
    assert victim.stop() == 0
    assert json.dumps(_shm_of(victim)[1]) == "[]"
