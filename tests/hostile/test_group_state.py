"""Standing cases against the group coordinator's state and its state file (issue 34):

- the state file written by anyone: seeded garbage, cuts and hostile records
  (valid CRC, misshapen or over the limits, deeply nested) in ``__groups.log``
  and in the whole-state ``__groups.json`` of before, links planted where
  temporary files are made, then the process holding the groups killed: its
  replacement must take over and serve, the broker must live, no link is
  followed, and each damage costs one log line;
- the largest JOIN_GROUP the request bounds let through (1,000 topics of 1,024
  streams): refused at once, at a cost to the coordinator's process of
  milliseconds, not seconds;
- a client that joins and leaves as fast as the broker answers, beside two members
  that behave: the two must still hold a generation most of the time.

Each test runs its own broker (:class:`tests.integration.broker.Broker`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import threading
import time
import zlib

import psutil
import pytest

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.coordinator.store import COMPACT_SUFFIX, FILENAME, LEGACY_FILENAME
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from tests.hostile.invariants import Violation
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill

TOPIC = "hg-topic"
STATE_PROCESS = "hb-coordinator"  # the process that holds the groups and loads their file


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    b.start()
    with b.client() as c:
        c.create_topic(TOPIC, 4)
    yield b
    stop_or_kill(b)


def member(broker, name: str) -> CoordinatorClient:
    return CoordinatorClient([broker.unix], timeout=15, client_id=name)


def frame(payload: bytes) -> bytes:
    return struct.pack(">iI", len(payload), zlib.crc32(payload)) + payload


def hostile_record(rng: random.Random) -> bytes:
    """A record with a valid CRC whose JSON is hostile."""
    good = {"type": "group", "group": "h", "phase": "STABLE", "generation": 1,
            "rebalance_deadline": None, "deferred_at": None, "generation_members": ["m"],
            "counts": {TOPIC: 4}, "assignment": {"m": {TOPIC: [[0, 1, 2, 3]]}},
            "members": [{"member_id": "m", "client_id": "c", "session_timeout_ms": 10000,
                         "rebalance_timeout_ms": 1000, "subscription": {TOPIC: 1},
                         "last_heartbeat": 0, "joined": False}]}
    choice = rng.randrange(9)
    if choice == 0:
        return b"[" * rng.choice([1000, 100000]) + b"]" * rng.choice([0, 1000])
    if choice == 1:
        return json.dumps(rng.choice([[1], [{"type": "group"}], 1, None, "x", {}])).encode()
    if choice == 2:
        return json.dumps({**good, "phase": rng.choice(["DANCING", "EMPTY", 1, None, ["STABLE"],
                                                        {"STABLE": 1}])}).encode()
    if choice == 3:
        good["members"][0]["subscription"] = {f"t{i}": 1024 for i in range(rng.choice([2, 1001]))}
        return json.dumps(good).encode()
    if choice == 4:
        good["members"] = good["members"] * rng.choice([2, 1001])
        return json.dumps(good).encode()
    if choice == 5:
        good["assignment"] = {"m": {TOPIC: [[2**40]]}}
        return json.dumps(good).encode()
    if choice == 6:
        return json.dumps({**good, "generation": rng.choice([-5, 2**63, 1.5, "1"])}).encode()
    if choice == 7:  # an integer no float can hold, where a time goes
        good["members"][0]["last_heartbeat"] = rng.choice([10**400, -10**400])
        return json.dumps(good).encode()
    return rng.randbytes(rng.randint(1, 200))


def damage(rng: random.Random, directory: str) -> None:
    path = os.path.join(directory, FILENAME)
    data = open(path, "rb").read() if os.path.isfile(path) else b""
    how = rng.randrange(3)
    if how == 0:
        data = data + frame(hostile_record(rng))
    elif how == 1:
        data = data[:rng.randint(0, len(data))] + rng.randbytes(rng.randint(0, 64))
    else:
        data = data + struct.pack(">iI", rng.choice([2**31 - 1, 1 << 30, -1]), 0)
    with open(path, "wb") as f:
        f.write(data)
    with open(os.path.join(directory, LEGACY_FILENAME), "wb") as f:
        f.write(hostile_record(rng))


def test_a_damaged_state_file_never_takes_the_broker_down(broker, seed, tmp_path):
    rng = random.Random(seed)
    directory = broker.settings["log.dirs"]
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    for round_ in range(4):
        for name in (FILENAME + COMPACT_SUFFIX, LEGACY_FILENAME + ".tmp"):
            link = os.path.join(directory, name)
            if not os.path.lexists(link):
                os.symlink(victim, link)  # a link where a temporary file is made
        c = member(broker, f"round-{round_}")
        try:
            joined = c.join_group(f"g{round_}", "", {TOPIC: 1}, session_timeout_ms=30000,
                                  rebalance_timeout_ms=5000)
            assert joined.error_code == ErrorCode.NONE
        finally:
            c.close()
        damage(rng, directory)
        pid = broker.workers()[STATE_PROCESS]
        os.kill(pid, signal.SIGKILL)
        broker.wait_worker_replaced(STATE_PROCESS, pid)
        time.sleep(0.5)
        if broker.proc.poll() is not None:
            raise Violation(f"seed {seed} round {round_}: the broker exited:\n{broker.log()}")
        with broker.client() as client:
            client.produce(TOPIC, 0, encode_message_set([b"alive"]), acks=-1)
        c = member(broker, "probe")
        try:
            joined = c.join_group(f"probe{round_}", "", {TOPIC: 1}, session_timeout_ms=30000,
                                  rebalance_timeout_ms=5000)
            assert joined.error_code == ErrorCode.NONE
        finally:
            c.close()
    lines = [line for line in broker.log().splitlines() if "group state" in line]
    assert 1 <= len(lines) <= 4, broker.log()
    assert victim.read_bytes() == b"precious"


def test_the_largest_join_the_request_bounds_allow_costs_milliseconds(broker):
    coordinator = psutil.Process(broker.workers()[STATE_PROCESS])
    c = member(broker, "big")
    try:
        before = coordinator.cpu_times()
        started = time.monotonic()
        for i in range(5):
            joined = c.join_group(f"big{i}", "", {f"topic-{t:04d}": 1024 for t in range(1000)},
                                  session_timeout_ms=30000, rebalance_timeout_ms=5000)
            assert joined.error_code == ErrorCode.INVALID_REQUEST
        after = coordinator.cpu_times()
        elapsed = time.monotonic() - started
    finally:
        c.close()
    used = (after.user + after.system) - (before.user + before.system)
    assert used < 1.0, f"five refused joins cost the coordinator {used:.2f} s of CPU"
    assert elapsed < 10
    with broker.client() as client:
        client.produce(TOPIC, 0, encode_message_set([b"after"]), acks=-1)


def test_join_and_leave_churn_cannot_keep_a_group_from_settling(broker):
    stop = threading.Event()
    held = {"a": 0, "b": 0}
    beats = {"a": 0, "b": 0}

    def behave(name):
        c = member(broker, name)
        try:
            joined = c.join_group("churned", "", {TOPIC: 1}, session_timeout_ms=3000,
                                  rebalance_timeout_ms=2000)
            member_id, generation = joined.member_id, joined.generation
            while not stop.is_set():
                code = c.heartbeat("churned", generation, member_id)
                beats[name] += 1
                if code == ErrorCode.NONE:
                    held[name] += 1
                elif code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                    joined = c.join_group("churned", member_id, {TOPIC: 1},
                                          session_timeout_ms=3000, rebalance_timeout_ms=2000)
                    generation = joined.generation
                else:
                    joined = c.join_group("churned", "", {TOPIC: 1}, session_timeout_ms=3000,
                                          rebalance_timeout_ms=2000)
                    member_id, generation = joined.member_id, joined.generation
                time.sleep(0.05)
        finally:
            c.close()

    def churn():
        c = member(broker, "churn")
        try:
            while not stop.is_set():
                joined = c.join_group("churned", "", {TOPIC: 1}, session_timeout_ms=3000,
                                      rebalance_timeout_ms=2000)
                if joined.error_code == ErrorCode.NONE:
                    c.leave_group("churned", joined.member_id)
        finally:
            c.close()

    good = [threading.Thread(target=behave, args=(n,)) for n in held]
    for t in good:
        t.start()
    time.sleep(1.0)
    bad = [threading.Thread(target=churn) for _ in range(2)]
    for t in bad:
        t.start()
    time.sleep(10.0)
    stop.set()
    for t in good + bad:
        t.join(timeout=20)
    for name in held:
        assert beats[name] > 20
        assert held[name] >= 0.6 * beats[name], (held, beats)
