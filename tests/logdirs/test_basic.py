"""Replicas across log dirs on one standalone broker of three dirs: topics made
with a replication factor are placed on distinct dirs, balanced; the tools
refuse what cannot be placed; acks=-1 produce reads back and the replicas'
files are the leader's; a follower's writer or the leader's writer SIGKILLed
under load loses no acknowledged message; a deleted topic leaves no replica
and no entry in the state file."""

from __future__ import annotations

import collections
import json
import os
import signal

import pytest

from hostbroker.exits import EXIT_USAGE
from hostbroker.log.message import encode_message_set
from hostbroker.shm.partitions import ROLE_LEADER
from tests.integration.cli import hostbroker, one_line_error
from tests.logdirs.support import (
    AckedLog,
    assert_all_acked,
    create,
    describe,
    described_partitions,
    dir_of,
    leader_dir,
    poll,
    read_back,
    replica_slots,
    wait_replicas_equal,
)

STATE_FILE = "log-dirs-state"


@pytest.fixture(scope="module")
def broker(dirs_broker):
    # auto-created topics get two replicas; CREATE_TOPIC v0 stays at one
    return dirs_broker(3, **{"default.replication.factor": 2})


def _full(broker, topic: str, partition: int, rf: int) -> bool:
    """A leader whose committed ISR is every replica."""
    slots = [s for _, s in replica_slots(broker, topic, partition)]
    return len(slots) == rf and any(s.role == ROLE_LEADER and len(s.isr_ids) == rf for s in slots)


def _end(broker, owner: int) -> int:
    """The log end of kf-0's replica on writer ``owner``."""
    (slot,) = [s for _, s in replica_slots(broker, "kf", 0) if s.owner == owner]
    return slot.end_offset


def test_replicas_are_placed_on_distinct_dirs_balanced_by_count_and_leaders(broker):
    create(broker, "two", 6, 2)
    create(broker, "three", 3, 3)
    for topic, partitions, rf in (("two", 6, 2), ("three", 3, 3)):
        replicas, leaders = collections.Counter(), collections.Counter()
        for p in range(partitions):
            dirs = [dir_of(broker, s) for _, s in replica_slots(broker, topic, p)]
            assert len(dirs) == len(set(dirs)) == rf, (topic, p, dirs)
            replicas.update(dirs)
            leaders[leader_dir(broker, topic, p)] += 1
        assert set(replicas.values()) == {partitions * rf // 3}, (topic, replicas)
        assert set(leaders.values()) == {partitions // 3}, (topic, leaders)


def test_describe_json_names_replicas_by_their_log_dir(broker):
    paths = {os.path.abspath(d) for d in broker.dirs}
    document = describe(broker, "two")
    assert isinstance(document, list)  # today's shape: the log dirs are `logdirs list`'s
    for p, entry in described_partitions(document, "two").items():
        assert entry["leader"] == leader_dir(broker, "two", p)
        assert entry["leader"] in entry["replicas"]
        assert set(entry["replicas"]) <= paths and len(set(entry["replicas"])) == 2
        assert sorted(entry["isr"]) == sorted(entry["replicas"])
        assert entry["under_replicated"] is False
        assert entry["leader_epoch"] >= 0


@pytest.mark.parametrize("rf, config, line", [
    (4, (), "replication factor 4 needs 4 usable log dirs; the broker has 3"),
    (9, (), "--replication-factor must be 1 to 8"),
    (0, (), "--replication-factor must be 1 to 8"),
    (2, ("min.insync.replicas=3",), "min.insync.replicas 3 is more than the replication factor 2"),
])
def test_what_cannot_be_placed_is_refused_in_one_line(broker, rf, config, line):
    done = hostbroker("topics", "create", "--bootstrap", broker.unix, "--topic", "refused",
                      "--partitions", 1, "--replication-factor", rf,
                      *[a for c in config for a in ("--config", c)])
    assert line in one_line_error(done)
    # the broker refused (1), or the tool did before connecting (a usage error)
    assert done.returncode == (1 if rf in (2, 4) else EXIT_USAGE)
    with broker.client() as c:
        names = [t.topic for t in c.metadata().topics]
    assert "refused" not in names


def test_auto_created_topics_get_the_default_replication_factor(broker):
    log = AckedLog(broker, "auto", 1, max_bytes=20_000)
    log.start()
    log.wait_acked(100)
    log.stop()
    assert len(replica_slots(broker, "auto", 0)) == 2
    assert_all_acked(log, read_back(broker, "auto"))
    # CREATE_TOPIC v0 is RF 1, as before
    with broker.client() as c:
        c.create_topic("plain", 1)
    assert len(replica_slots(broker, "plain", 0)) == 1


def test_acks_all_produce_reads_back_and_replicas_are_byte_identical(broker):
    log = AckedLog(broker, "two", 6, max_bytes=600_000)
    log.start()
    log.join(60)
    log.stop()
    assert_all_acked(log, read_back(broker, "two"))
    for p in range(6):
        wait_replicas_equal(broker, "two", p)


def test_a_follower_writer_killed_while_it_copies_catches_up(broker):
    create(broker, "kf", 1, 2)
    (follower,) = [s for _, s in replica_slots(broker, "kf", 0) if s.role != ROLE_LEADER]
    name = f"hb-writer-{follower.owner}"
    victim = broker.workers()[name]
    # stopped, it falls behind by many copies (replica.fetch.max.bytes, 1 MiB): its
    # next run is a catch-up, and it is killed in the middle of it
    os.kill(victim, signal.SIGSTOP)
    acked = []
    try:
        with broker.client() as c:
            for i in range(100):
                batch = [f"kf-{i}-{j}".encode() * 20 for j in range(500)]  # ~100 KB
                c.produce("kf", 0, encode_message_set(batch), acks=1)
                acked += [(0, v) for v in batch]
        before = _end(broker, follower.owner)
    finally:
        os.kill(victim, signal.SIGCONT)
    poll(lambda: _end(broker, follower.owner) > before, 10, "the follower copying again",
         every=0.001)
    os.kill(victim, signal.SIGSTOP)  # (stopped, it copies no more: what it holds is read)
    try:
        (leader,) = [s for _, s in replica_slots(broker, "kf", 0) if s.role == ROLE_LEADER]
        behind = leader.end_offset - _end(broker, follower.owner)
    finally:
        os.kill(victim, signal.SIGKILL)
    assert behind > 0, "the follower had caught up before it was killed"
    broker.wait_worker_replaced(name, victim)
    log = AckedLog(broker, "kf", 1, max_bytes=100_000)
    log.start()
    log.join(60)
    log.stop()
    read = read_back(broker, "kf")
    assert_all_acked(acked, read)
    assert_all_acked(log, read)
    poll(lambda: _full(broker, "kf", 0, 2), 15, "the follower back in the ISR")
    wait_replicas_equal(broker, "kf", 0)


def test_the_leader_writer_killed_under_load_loses_no_acknowledged_message(broker):
    create(broker, "kl", 2, 2)
    log = AckedLog(broker, "kl", 2, max_bytes=2_000_000)
    log.start()
    log.wait_acked(500)
    (leader,) = [s for _, s in replica_slots(broker, "kl", 0) if s.role == ROLE_LEADER]
    name = f"hb-writer-{leader.owner}"
    victim = broker.workers()[name]
    os.kill(victim, signal.SIGKILL)
    broker.wait_worker_replaced(name, victim)
    # leadership stays (the writer is back within the grace) or moves past it
    seen = len(log.acked)
    log.wait_acked(seen + 500)
    log.stop()
    assert_all_acked(log, read_back(broker, "kl"))
    for p in range(2):
        poll(lambda p=p: _full(broker, "kl", p, 2), 15, f"kl-{p}: the ISR full again")
        wait_replicas_equal(broker, "kl", p)


def test_delete_removes_every_replica_and_the_state_entry(broker):
    create(broker, "gone", 2, 3)
    with broker.client() as c:
        c.produce("gone", 0, encode_message_set([b"x"]), acks=-1)
        c.delete_topic("gone")

    def state_files():
        return [json.load(open(os.path.join(d, STATE_FILE))) for d in broker.dirs]

    def gone() -> bool:
        return (not any(replica_slots(broker, "gone", p) for p in range(2))
                and not any(os.path.exists(os.path.join(d, f"gone_{p}"))
                            for d in broker.dirs for p in range(2))
                and all("gone" not in s["topics"] and "gone" not in s.get("deleting", [])
                        for s in state_files()))

    poll(gone, 15, "every replica of gone deleted, and its state entry")
