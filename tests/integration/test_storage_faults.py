"""Damaged and stubborn files, caused for real against ``hostbroker serve``:
partition files and segments damaged between a clean stop and a start, an
unusable log dir, a segment cut or grown after a clean shutdown, topics with
the longest names, and deletions the file system refuses (``chattr +i``).

Each case checks that only what is damaged goes offline (STORAGE_ERROR in
METADATA, PRODUCE and FETCH, listed by ``hostbroker top``), with one log line
naming the file, while everything else keeps serving and no worker is
replaced."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.log.segments import segment_filename
from tests.integration.test_faults import read_all

FIRST_SEGMENT = segment_filename(0)


@contextlib.contextmanager
def immutable(path: str):
    """``chattr +i`` on ``path`` for the block (root may not write, rename or remove it)."""
    subprocess.run(["chattr", "+i", path], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", path], check=True)


def partition_dir(broker, topic: str, partition: int = 0, log_dir: int = 0) -> str:
    return os.path.join(broker.settings["log.dirs"].split(",")[log_dir], f"{topic}_{partition}")


def metadata_codes(client, topic: str) -> dict[int, ErrorCode]:
    (found,) = client.metadata([topic]).topics
    assert found.error_code == ErrorCode.NONE
    return {p.partition: p.error_code for p in found.partitions}


def top_json(broker) -> dict:
    args = [sys.executable, "-m", "hostbroker", "top", "--json", "--interval", "0.1",
            "--iterations", "1", "--set", f"log.dirs={broker.settings['log.dirs']}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out.splitlines()[-1])


def produce_code(client, topic: str, partition: int = 0) -> ErrorCode:
    return client.produce(topic, partition, encode_message_set([b"x"]),
                          raise_on_error=False).error_code


def fetch_code(client, topic: str, partition: int = 0) -> ErrorCode:
    return client.fetch(topic, partition, 0, 1024, raise_on_error=False).error_code


def assert_serves(client, topic: str, before: list[bytes]) -> None:
    client.produce(topic, 0, encode_message_set([b"after"]))
    assert read_all(client, topic) == before + [b"after"]


# -- damage found at start (issue 7, item 10) ---------------------------------

def _write(name: str, data: bytes):
    def damage(path: str, stack: contextlib.ExitStack) -> None:
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)
    return damage


def _segment_made_a_directory(path: str, stack: contextlib.ExitStack) -> None:
    os.unlink(os.path.join(path, FIRST_SEGMENT))
    os.mkdir(os.path.join(path, FIRST_SEGMENT))


def _segment_made_immutable(path: str, stack: contextlib.ExitStack) -> None:
    stack.enter_context(immutable(os.path.join(path, FIRST_SEGMENT)))


DAMAGE = {
    "invalid JSON": (_write("partition.json", b"{not json"), "partition.json is not a valid"),
    "a JSON list": (_write("partition.json", b"[1,2,3]"), "expected a JSON object"),
    "an empty partition.json": (_write("partition.json", b""), "partition.json is not a valid"),
    "another partition's partition.json": (
        _write("partition.json", b'{"topic": "fine", "partition": 0, "partitions": 1, '
                                 b'"config": {}}'), "names partition fine-0"),
    "a segment replaced by a directory": (_segment_made_a_directory, "is not a regular file"),
    "an immutable segment": (_segment_made_immutable, "Operation not permitted"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_partition_goes_offline_alone(make_broker, kind):
    damage, reason = DAMAGE[kind]
    broker = make_broker()
    with broker.client() as c:
        c.create_topic("fine", 1)
        c.create_topic("hurt", 2)
        c.produce("fine", 0, encode_message_set([b"f1", b"f2"]))
        c.produce("hurt", 0, encode_message_set([b"h1"]))
        c.produce("hurt", 1, encode_message_set([b"h2"]))
    assert broker.stop() == 0
    with contextlib.ExitStack() as stack:
        damage(partition_dir(broker, "hurt", 0), stack)
        broker.start()
        workers = broker.workers()
        lines = [ln for ln in broker.log().splitlines() if "hurt_0" in ln]
        assert len(lines) == 1 and reason in lines[0] and "offline" in lines[0], lines
        with broker.client() as c:
            assert metadata_codes(c, "hurt") == {0: ErrorCode.STORAGE_ERROR, 1: ErrorCode.NONE}
            assert metadata_codes(c, "fine") == {0: ErrorCode.NONE}
            assert produce_code(c, "hurt", 0) == ErrorCode.STORAGE_ERROR
            assert fetch_code(c, "hurt", 0) == ErrorCode.STORAGE_ERROR
            with pytest.raises(BrokerError) as e:
                c.offsets("hurt", 0, -1, 1)
            assert e.value.code == ErrorCode.STORAGE_ERROR
            assert_serves(c, "fine", [b"f1", b"f2"])
            c.produce("hurt", 1, encode_message_set([b"h3"]))
            assert read_all(c, "hurt", 1) == [b"h2", b"h3"]
            # new topics still go to this log dir: only the partition is offline
            c.create_topic("later", 1)
            assert_serves(c, "later", [])
        reading = top_json(broker)
        assert reading["offline_partitions"] == [
            {"topic": "hurt", "partition": 0, "log_dir": broker.settings["log.dirs"]}]
        assert reading["offline_log_dirs"] == []
        assert broker.workers() == workers
        assert broker.stop() == 0
    # Repaired or not, an offline partition can be deleted and its topic made again.
    broker.start()
    with broker.client() as c:
        c.delete_topic("hurt")
        c.create_topic("hurt", 1)
        assert_serves(c, "hurt", [])
        assert read_all(c, "fine") == [b"f1", b"f2", b"after"]


def test_an_unusable_log_dir_goes_offline_and_the_others_serve(make_broker, tmp_path):
    dirs = [str(tmp_path / "disk0"), str(tmp_path / "disk1")]
    broker = make_broker(log_dirs=",".join(dirs))
    with broker.client() as c:
        c.create_topic("spread", 2)  # one partition on each log dir
        for p in (0, 1):
            c.produce("spread", p, encode_message_set([f"p{p}".encode()]))
    assert broker.stop() == 0
    # A log dir whose lock file cannot be opened cannot be used at all (immutable,
    # so root may not open it for writing; anything but a regular file in its
    # place is replaced). One that is not writable is refused at start, with
    # the rest of the configuration.
    lock = os.path.join(dirs[1], ".lock")
    with immutable(lock):
        broker.start()
    workers = broker.workers()
    lines = [ln for ln in broker.log().splitlines() if f"log dir {dirs[1]} is offline" in ln]
    assert len(lines) == 1 and "Operation not permitted" in lines[0], broker.log()
    with broker.client() as c:
        on_disk1 = 0 if os.path.isdir(os.path.join(dirs[1], "spread_0")) else 1
        codes = metadata_codes(c, "spread")
        assert codes[on_disk1] == ErrorCode.STORAGE_ERROR
        assert codes[1 - on_disk1] == ErrorCode.NONE
        assert produce_code(c, "spread", on_disk1) == ErrorCode.STORAGE_ERROR
        assert fetch_code(c, "spread", on_disk1) == ErrorCode.STORAGE_ERROR
        c.produce("spread", 1 - on_disk1, encode_message_set([b"more"]))
        assert read_all(c, "spread", 1 - on_disk1) == [f"p{1 - on_disk1}".encode(), b"more"]
        c.create_topic("fresh", 3)
        for p in range(3):
            c.produce("fresh", p, encode_message_set([b"ok"]))
    assert {f"fresh_{p}" for p in range(3)} <= set(os.listdir(dirs[0]))
    assert not any(name.startswith("fresh") for name in os.listdir(dirs[1]))
    reading = top_json(broker)
    assert reading["offline_log_dirs"] == [dirs[1]]
    assert [p["log_dir"] for p in reading["offline_partitions"]] == [dirs[1]]
    assert broker.workers() == workers
    assert broker.stop() == 0


# -- a segment cut or grown after a clean shutdown (item 11) ----------------

@pytest.mark.parametrize("damage", ["cut mid-entry", "garbage appended"])
def test_a_damaged_tail_after_a_clean_shutdown_is_cut(make_broker, damage):
    broker = make_broker()
    kept = [f"entry-{i}".encode() * 20 for i in range(30)]
    with broker.client() as c:
        c.create_topic("tail", 1)
        for payload in kept:
            c.produce("tail", 0, encode_message_set([payload]))
    assert broker.stop() == 0
    segment = os.path.join(partition_dir(broker, "tail"), FIRST_SEGMENT)
    size = os.path.getsize(segment)
    if damage == "cut mid-entry":
        with open(segment, "r+b") as f:
            f.truncate(size - 7)
        kept = kept[:-1]  # the entry the cut went through is gone; every other one stays
    else:
        with open(segment, "ab") as f:
            f.write(os.urandom(100))
    broker.start()
    line = [ln for ln in broker.log().splitlines() if "not whole valid entries" in ln]
    assert len(line) == 1 and FIRST_SEGMENT in line[0], broker.log()
    with broker.client() as c:
        c.produce("tail", 0, encode_message_set([b"new"]))
        assert read_all(c, "tail") == kept + [b"new"]  # read_all checks every CRC


# -- names and deletions (item 1) -------------------------------------------

@pytest.mark.parametrize("length", [232, 248, 249])
def test_topics_with_the_longest_names_are_deleted(broker, length):
    writer = broker.workers()["hb-writer-0"]
    made = "m" * length
    auto = "a" * length
    with broker.client() as c:
        c.create_topic(made, 12)  # partition dir names up to 252 bytes
        c.produce(made, 11, encode_message_set([b"x"]))
        c.produce(auto, 0, encode_message_set([b"y"]))  # auto-created
        c.delete_topic(made)
        c.delete_topic(auto)
        assert c.metadata([made]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        c.create_topic(made, 1)
        assert_serves(c, made, [])
    assert broker.workers()["hb-writer-0"] == writer
    assert not [name for name in os.listdir(broker.settings["log.dirs"]) if auto in name]
    assert os.listdir(os.path.join(broker.settings["log.dirs"], ".trash")) == []


def test_a_longest_name_with_four_digit_partitions_is_deleted(broker):
    topic = "d" * 249
    writer = broker.workers()["hb-writer-0"]
    with broker.client(timeout=120) as c:
        c.metadata()  # (a connection's first answer is bounded by its setup timeout)
        c.create_topic(topic, 1001)  # "<topic>_1000" is 254 bytes
        assert os.path.isdir(partition_dir(broker, topic, 1000))
        c.produce(topic, 1000, encode_message_set([b"last"]))
        assert read_all(c, topic, 1000) == [b"last"]
        c.delete_topic(topic)
        assert c.metadata([topic]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.workers()["hb-writer-0"] == writer
    assert not [n for n in os.listdir(broker.settings["log.dirs"]) if n.startswith("ddd")]


def test_a_topic_name_past_249_characters_is_refused(broker):
    with broker.client() as c:
        with pytest.raises(BrokerError) as e:
            c.create_topic("n" * 250, 1)
        assert e.value.code == ErrorCode.INVALID_TOPIC
        assert produce_code(c, "n" * 250) == ErrorCode.INVALID_TOPIC


def test_a_delete_the_file_system_refuses_stops_nothing_and_is_retried(make_broker):
    broker = make_broker(log_retention_check_interval_ms=300)
    log_dir = broker.settings["log.dirs"]
    writer = broker.workers()["hb-writer-0"]
    with broker.client() as c:
        c.create_topic("stuck", 2)
        c.create_topic("other", 1)
        c.produce("stuck", 0, encode_message_set([b"s"]))
        c.produce("other", 0, encode_message_set([b"o1"]))
        with immutable(log_dir):  # nothing in it can be renamed into .trash/
            with pytest.raises(BrokerError) as e:
                c.delete_topic("stuck")
            assert e.value.code == ErrorCode.STORAGE_ERROR
            assert "Operation not permitted" in str(e.value)
            assert_serves(c, "other", [b"o1"])
            with pytest.raises(BrokerError) as e:  # still being deleted: not made again
                c.create_topic("stuck", 1)
            assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
            assert broker.workers()["hb-writer-0"] == writer
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not any(n.startswith("stuck_") for n in os.listdir(log_dir)):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the delete was not retried:\n{broker.log()}")
        deadline = time.monotonic() + 10
        while c.create_topic("stuck", 1, raise_on_error=False).error_code != ErrorCode.NONE:
            assert time.monotonic() < deadline, broker.log()
            time.sleep(0.05)
        assert_serves(c, "stuck", [])
    lines = [ln for ln in broker.log().splitlines() if "cannot delete partition stuck" in ln]
    assert len(lines) == 2 and all("Operation not permitted" in ln for ln in lines), lines
    assert broker.workers()["hb-writer-0"] == writer
    assert broker.stop() == 0


def test_a_segment_retention_cannot_delete_takes_nothing_offline(make_broker):
    broker = make_broker(log_retention_check_interval_ms=200)
    writer = broker.workers()["hb-writer-0"]
    with broker.client() as c:
        c.create_topic("aged", 1, {"segment.bytes": "1024", "retention.ms": "3600000"})
        for i in range(8):
            c.produce("aged", 0, encode_message_set([f"{i}".encode() * 500]))
        path = partition_dir(broker, "aged")
        segments = sorted(n for n in os.listdir(path) if n.endswith(".kafka"))
        assert len(segments) >= 4
        old = time.time() - 7200
        # both expired; the second will not go. The second is aged and made
        # immutable first: retention takes the oldest segments only up to the
        # first one not expired, so a check in between takes nothing.
        stuck = os.path.join(path, segments[1])
        os.utime(stuck, (old, old))
        with immutable(stuck):
            os.utime(os.path.join(path, segments[0]), (old, old))
            deadline = time.monotonic() + 10
            while c.offsets("aged", 0, -2, 1)[0] == 0:
                assert time.monotonic() < deadline, broker.log()
                time.sleep(0.05)
            assert c.offsets("aged", 0, -2, 1)[0] == int(segments[1][:20])
            time.sleep(1)  # five more retention checks
            lines = [ln for ln in broker.log().splitlines() if "retention:" in ln]
            assert len(lines) == 1 and segments[1] in lines[0], lines
            assert "Operation not permitted" in lines[0]
            assert metadata_codes(c, "aged") == {0: ErrorCode.NONE}
            c.produce("aged", 0, encode_message_set([b"still"]))
            assert read_all(c, "aged")[-1] == b"still"
            assert broker.workers()["hb-writer-0"] == writer
        deadline = time.monotonic() + 10
        while c.offsets("aged", 0, -2, 1)[0] != int(segments[2][:20]):
            assert time.monotonic() < deadline, broker.log()
            time.sleep(0.05)


def test_a_replaced_writer_takes_a_partition_it_cannot_open_offline(broker):
    with broker.client() as c:
        c.create_topic("fine", 1)
        c.create_topic("hurt", 1)
        c.produce("fine", 0, encode_message_set([b"f"]))
        c.produce("hurt", 0, encode_message_set([b"h"]))
    segment = os.path.join(partition_dir(broker, "hurt"), FIRST_SEGMENT)
    with immutable(segment):
        victim = broker.workers()["hb-writer-0"]
        os.kill(victim, signal.SIGKILL)
        broker.wait_worker_replaced("hb-writer-0", victim)
        with broker.client() as c:
            deadline = time.monotonic() + 10
            while metadata_codes(c, "hurt") != {0: ErrorCode.STORAGE_ERROR}:
                assert time.monotonic() < deadline, broker.log()
                time.sleep(0.05)
            assert produce_code(c, "hurt") == ErrorCode.STORAGE_ERROR
            assert_serves(c, "fine", [b"f"])
    assert "partition hurt-0 is offline" in broker.log()


# -- state files of any content or shape (issue 34) ---------------------------

STATE_FILES = ("recovery-point-offset-checkpoint", ".clean_shutdown", ".lock", ".broker.lock",
               "__consumer_offsets.log")
STATE_DAMAGE = ("garbage", "nested", "directory", "dangling link", "huge")


def _damage_state_file(path: str, damage: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    elif os.path.lexists(path):
        os.unlink(path)
    if damage == "directory":
        os.makedirs(os.path.join(path, "inside"))
    elif damage == "dangling link":
        os.symlink(path + ".nowhere", path)
    elif damage == "huge":
        with open(path, "wb") as f:
            f.truncate(3 << 30)  # sparse
    else:
        with open(path, "wb") as f:
            f.write(os.urandom(65536) if damage == "garbage" else b"[" * 100_000)


@pytest.mark.parametrize("shift", range(len(STATE_DAMAGE)))
def test_bad_state_files_lose_only_their_own_state(make_broker, shift):
    """Every state file of a log dir damaged at once (each in another way, the
    ways rotating between runs): the broker starts, no worker dies, each
    partition serves what it held, and each file is whole again after a stop."""
    broker = make_broker()
    with broker.client() as client:
        client.create_topic("kept", 2)
        for partition in (0, 1):
            client.produce("kept", partition, encode_message_set([b"a", b"b"]), acks=-1)
        client.offset_commit("g", [("kept", 0, 1, "m")])
    assert broker.stop() == 0
    logs = broker.settings["log.dirs"]
    for i, name in enumerate(STATE_FILES):
        _damage_state_file(os.path.join(logs, name), STATE_DAMAGE[(i + shift) % len(STATE_DAMAGE)])
    broker.start()
    workers = broker.workers()
    with broker.client() as client:
        for partition in (0, 1):
            assert read_all(client, "kept", partition) == [b"a", b"b"]
            assert produce_code(client, "kept", partition) == ErrorCode.NONE
        client.offset_commit("g", [("kept", 1, 2, "")])
    assert broker.workers() == workers  # none replaced
    assert broker.stop() == 0
    for name in STATE_FILES:
        path = os.path.join(logs, name)
        assert os.path.isfile(path) and not os.path.islink(path), name
    assert os.path.getsize(os.path.join(logs, "recovery-point-offset-checkpoint")) < 4096
