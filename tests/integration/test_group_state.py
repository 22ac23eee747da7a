"""The group state file through a real ``hostbroker serve`` (docs/spec/groups.md, "The
state file"): whatever is in it, or in its place, the broker starts, serves, and says
so in one log line; a replacement of the process that holds the groups takes a
damaged file's prefix over and keeps serving, where it used to die on every start
until the whole broker exited."""

from __future__ import annotations

import json
import os
import signal
import struct
import time
import zlib

import pytest

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.coordinator.store import COMPACT_SUFFIX, FILENAME, LEGACY_FILENAME
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set

TOPIC = "gs-topic"
STATE_PROCESS = "hb-coordinator"  # the process that holds the groups and loads their file


def frame(payload: bytes) -> bytes:
    return struct.pack(">iI", len(payload), zlib.crc32(payload)) + payload


def client(broker) -> CoordinatorClient:
    return CoordinatorClient([broker.unix], timeout=10, client_id="gs-test")


def join_alone(broker, group: str):
    c = client(broker)
    try:
        joined = c.join_group(group, "", {TOPIC: 1}, session_timeout_ms=30000,
                              rebalance_timeout_ms=5000)
        assert joined.error_code == ErrorCode.NONE, joined
        return joined
    finally:
        c.close()


def serves(broker) -> None:
    """Produce, fetch, and a group forms."""
    with broker.client() as c:
        c.produce(TOPIC, 0, encode_message_set([b"still here"]), acks=-1)
        assert c.fetch(TOPIC, 0, 0, 1 << 20) is not None
    join_alone(broker, f"probe-{time.monotonic_ns()}")


def state_lines(broker) -> list[str]:
    return [line for line in broker.log().splitlines() if "group state" in line]


def log_dir(broker) -> str:
    return broker.settings["log.dirs"]


@pytest.fixture
def broker(make_broker):
    b = make_broker()
    with b.client() as c:
        c.create_topic(TOPIC, 2)
    return b


DAMAGE = {
    "list-of-one": b"[1]",
    "group-without-fields": b'[{"type":"group"}]',
    "bad-phase": json.dumps([{"type": "group", "group": "g", "phase": "DANCING"}]).encode(),
    "nested-brackets": b"[" * 100000 + b"]" * 100000,
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_replacement_over_a_damaged_state_file_serves_and_logs_one_line(broker, kind):
    kept = join_alone(broker, "kept")
    content = DAMAGE[kind]
    directory = log_dir(broker)
    with open(os.path.join(directory, FILENAME), "ab") as f:
        f.write(frame(content))  # framed as a record, after the good ones
    with open(os.path.join(directory, LEGACY_FILENAME), "wb") as f:
        f.write(content)  # the whole-state file of before, as it was attacked
    before = set(broker.workers().values())
    pid = broker.workers()[STATE_PROCESS]
    os.kill(pid, signal.SIGKILL)
    broker.wait_worker_replaced(STATE_PROCESS, pid)
    time.sleep(1.0)  # a replacement that dies on its load would be dying now
    assert broker.proc.poll() is None, broker.log()
    replacement = broker.workers()[STATE_PROCESS]
    assert replacement not in before
    serves(broker)
    assert broker.workers()[STATE_PROCESS] == replacement
    lines = state_lines(broker)
    assert len(lines) == 1, broker.log()
    assert FILENAME in lines[0] and "record" in lines[0]
    # what came before the damage was taken over: the member is still one
    c = client(broker)
    try:
        assert c.heartbeat("kept", kept.generation, kept.member_id) == ErrorCode.NONE
    finally:
        c.close()


def test_a_broker_restarted_over_a_directory_and_links_starts_serves_and_logs_one_line(
        broker, tmp_path):
    join_alone(broker, "before")
    broker.stop()
    directory = log_dir(broker)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    for name in (FILENAME, LEGACY_FILENAME):  # the state file of now and of before
        if os.path.lexists(os.path.join(directory, name)):
            os.unlink(os.path.join(directory, name))
        os.mkdir(os.path.join(directory, name))
        with open(os.path.join(directory, name, "inside"), "w") as f:
            f.write("x")
    os.symlink(victim, os.path.join(directory, FILENAME + COMPACT_SUFFIX))
    broker.start()
    serves(broker)
    lines = state_lines(broker)
    assert len(lines) == 1, broker.log()
    assert FILENAME in lines[0]
    assert victim.read_bytes() == b"precious"
    assert open(os.path.join(directory, FILENAME, "inside")).read() == "x"
    # the process that holds the groups, replaced, still finds the directory: one line
    pid = broker.workers()[STATE_PROCESS]
    os.kill(pid, signal.SIGKILL)
    broker.wait_worker_replaced(STATE_PROCESS, pid)
    serves(broker)
    assert len(state_lines(broker)) == 2, broker.log()
    assert broker.proc.poll() is None
