"""hb-logdirs' admin changes, driven round by round: every change is durable
before it applies (a state file write that fails for real, on a full tmpfs,
changes nothing), a creation is made a few replicas per round and a crash in
the middle of one leaves only strays, and a topic's config is kept as the
broker reads it.

The rig is test_logdirs_worker's (real tables and dirs, stand-in rings and
board); here each log dir is a small tmpfs of its own, so that one of them can
be filled (ENOSPC). Needs root, as every test that mounts.
"""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.shm import partitions as ptable
from hostbroker.workers.logdirs.model import Part
from tests.mounts import fill, tmpfs
from tests.workers.test_logdirs_worker import Harness, create

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root only)")


@pytest.fixture
def rig(tmp_path):
    """``rig(**settings)``: a Harness whose three dirs are tmpfs mounts."""
    with contextlib.ExitStack() as stack:
        made = []

        def make(**settings):
            for i in range(3):
                stack.enter_context(tmpfs(str(tmp_path / f"d{i}"), "2m"))
            made.append(Harness(tmp_path, **settings))
            return made[-1]

        try:
            yield make
        finally:
            for harness in made:
                harness.close()


@contextlib.contextmanager
def full(path):
    """The tmpfs of ``path`` full for the block (its state file writes fail)."""
    filler = fill(path)
    try:
        yield
    finally:
        os.remove(filler)


def entries(h):
    return {tp: (list(p.replicas), p.leader, p.leader_epoch, list(p.isr), p.version,
                 list(p.target)) for tp, p in h.w.doc.parts.items()}


def test_a_reassignment_whose_write_fails_changes_nothing(rig):
    h = rig()
    create(h, partitions=1, rf=2)
    part = h.w.doc.parts[("t", 0)]
    old, kept = part.replicas
    new = ({1, 2, 3} - {old, kept}).pop()
    before, seq = entries(h), h.copy(0).seq
    with full(h.paths[h.dirtable.index_of(old)]):
        answer = h.w._alter([["t", 0, [new, kept]]])
        assert answer["error"] == ErrorCode.STORAGE_ERROR, answer
        assert entries(h) == before and not h.w.doc.moving()
        for i in range(3):  # (the dirs that took the failed write were written back)
            if h.paths[i] != h.paths[h.dirtable.index_of(old)]:
                assert h.copy(i).topics["t"].partitions[0].target == ()
        h.w._scan()
        assert new not in h.w.slots[("t", 0)]  # no replica made for it
        # the full dir left the live set: the same move, asked again, is not "in progress"
        # and is written on the others
        answer = h.w._alter([["t", 0, [new, kept]]])
        assert answer["error"] == ErrorCode.NONE, answer
    assert h.copy(h.dirtable.index_of(kept)).seq > seq
    assert h.w.doc.parts[("t", 0)].target == [new, kept]


def test_a_reassignment_step_whose_write_fails_moves_no_leader(rig):
    h = rig()
    create(h, partitions=1, rf=2)
    part = h.w.doc.parts[("t", 0)]
    old, kept = part.replicas
    new = ({1, 2, 3} - {old, kept}).pop()
    assert h.w._alter([["t", 0, [new, kept]]])["error"] == ErrorCode.NONE
    h.w._pass(0.0)
    h.apply(h.states()[0])
    slot = h.w.slots[("t", 0)][old]
    s = h.table.read(slot)
    h.table.write(slot, isr_wanted=ptable.isr_bits(s.replicas, [old, kept, new]))
    h.w.isr.poll()
    before = entries(h)
    gen = h.table.generation
    with full(h.paths[h.dirtable.index_of(kept)]):
        h.w.admin_round(0.0)  # the leader would leave its dir: not written, not moved
        assert entries(h) == before
        assert h.table.generation == gen
    h.w.admin_round(0.0)  # written on the others now (the full dir is out): it moves
    assert h.w.doc.parts[("t", 0)].leader == new


def test_forget_whose_write_fails_forgets_nothing(rig):
    h = rig()
    create(h, partitions=2, rf=2)
    h.w.writers.close()
    os.remove(os.path.join(h.paths[2], "log-dirs-state"))  # dir 3 missing at the restart
    h.dirtable.fill([1, 2, -1])
    h.table.set_log_dir_offline(2)
    w = h.start()
    assert w.blocked == {3}
    dirs = dict(w.doc.dirs)
    with full(h.paths[0]):
        answer = w._forget(3)
        assert answer["error"] == ErrorCode.STORAGE_ERROR, answer
        assert w.blocked == {3} and w.doc.dirs == dirs
        assert 3 in h.copy(1).dirs  # (written back where the failed write went)
    assert w._forget(3)["error"] == ErrorCode.NONE  # (dir 1 is out of the writes now)
    assert 3 not in w.doc.dirs and w.blocked == set()


def test_the_end_of_a_deletion_whose_write_fails_keeps_the_topic_until_written(rig):
    h = rig()
    create(h, "gone", partitions=1, rf=2)
    assert h.w._delete("gone")["error"] == ErrorCode.NONE
    got, _ = h.states()
    for (topic, _, _), body in got.items():
        h.w.admin_answered(("delete", topic, body["slot"]), 0, {"error": 0})
    h.apply(got)
    h.w._scan()
    with full(h.paths[0]):
        h.w.admin_round(0.0)
        assert "gone" in h.w.doc.configs and h.w.doc.deleting == ["gone"]
        assert ("gone", 0) in h.w.doc.parts
        assert h.copy(1).deleting == ("gone",)  # (written back where the failed write went)
    h.w.admin_round(0.0)  # dropped again, and written on the others
    assert "gone" not in h.w.doc.configs and h.w.doc.deleting == []
    assert h.copy(1).deleting == () and "gone" not in h.copy(1).topics


def test_a_creation_whose_write_fails_leaves_no_topic_and_only_strays(rig, monkeypatch):
    from hostbroker.workers import replica_slots

    h = rig()
    create(h, "first", partitions=1, rf=2)  # (a document on disk already)
    real, made, fillers = replica_slots.create_replica, [], []

    def then_full(*args, **kwargs):  # the disk of dir 1 fills once the last replica is made
        made.append(real(*args, **kwargs))
        if len(made) == 3:
            fillers.append(fill(h.paths[0]))
        return made[-1]

    monkeypatch.setattr(replica_slots, "create_replica", then_full)
    try:
        answer = h.w._create("t", 1, 3, {})
        assert answer["error"] == ErrorCode.STORAGE_ERROR, answer
        assert "t" not in h.w.doc.configs
        assert "t" not in h.copy(1).topics and "t" not in h.copy(2).topics
    finally:
        for filler in fillers:
            os.remove(filler)
    h.w._pass(0.0)
    h.w.admin_round(0.0)
    got, _ = h.states()
    assert {body["slot"] for body in got.values() if body.get("delete")} == set(made)


def test_a_topic_config_is_kept_as_the_broker_reads_it(rig):
    h = rig()
    padded = " " * 28 + "0060000" + " " * 28  # (64 characters: the most a value may have)
    create(h, partitions=1, rf=2, config={"retention.ms": padded})
    assert h.w.doc.configs["t"] == {"retention.ms": "60000"}
    assert dict(h.copy(0).topics["t"].config) == {"retention.ms": "60000"}
    assert os.path.getsize(os.path.join(h.paths[0], "log-dirs-state")) < 4096


def test_a_creation_past_the_state_file_limit_is_refused_before_anything_is_made(rig):
    h = rig(**{"logdirs.state.max.bytes": 4096})
    doc = h.w.doc
    doc.configs["pad"] = {}
    while len(doc.encode()) < 3900:  # (a document near the limit, made here)
        doc.parts[("pad", len(doc.parts))] = Part([1, 2], 1, 0, [1, 2], 0)
    assert len(doc.encode()) < 4096
    answer = h.w._create("big", 2, 2, {})
    assert answer["error"] == ErrorCode.INVALID_REQUEST, answer
    assert "over logdirs.state.max.bytes 4096" in answer["message"]
    h.w._scan()
    assert h.w.slots == {} and "big" not in h.w.doc.configs and not h.w.creating


def slow_creates(monkeypatch, seconds):
    """Each replica takes at least ``seconds`` to make (a slow disk's mkdir and fsyncs)."""
    from hostbroker.workers import replica_slots

    real = replica_slots.create_replica

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(replica_slots, "create_replica", slow)


def test_a_creation_is_made_a_few_replicas_per_round(rig, monkeypatch):
    h = rig(**{"logdirs.create.round.ms": 10})
    slow_creates(monkeypatch, 0.005)
    assert h.w._create("many", 8, 2, {}, 0, 5) is None  # not all made in one round
    assert "many" not in h.w.doc.configs  # (written once every replica is there)
    assert h.w._create("many", 1, 2, {})["error"] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert h.w.creation_due()
    rounds = 1
    while h.w.creating:
        made = sum(len(s) for t, s in _slots(h).items() if t[0] == "many")
        h.w.admin_round(0.0)
        rounds += 1
        # one replica at least, and no more than a 10 ms round holds at 5 ms each
        assert 1 <= sum(len(s) for t, s in _slots(h).items() if t[0] == "many") - made <= 3
    assert rounds >= 6
    ((_, token, answer),) = h.answers.take()
    assert token == 5 and answer["error"] == ErrorCode.NONE, answer
    assert sorted(p for _, p, _ in answer["results"]) == list(range(8))
    assert sorted(h.copy(0).topics["many"].partitions) == list(range(8))
    h.w._pass(0.0)
    got, _ = h.states()
    assert len(got) == 16 and sum(b["role"] == "leader" for b in got.values()) == 8


def test_a_crash_in_the_middle_of_a_creation_leaves_only_strays(rig, monkeypatch):
    h = rig(**{"logdirs.create.round.ms": 10})
    slow_creates(monkeypatch, 0.005)
    assert h.w._create("half", 8, 2, {}) is None
    h.w.admin_round(0.0)
    made = {slot for slots in _slots(h).values() for slot in slots.values()}
    assert made and len(made) < 16
    h.w.writers.close()
    w = h.start()  # hb-logdirs replaced: the topic was never written
    assert "half" not in w.doc.configs
    w._pass(time.monotonic())
    w.admin_round(0.0)
    got, _ = h.states()
    assert {body["slot"] for body in got.values() if body.get("delete")} == made


def _slots(h):
    h.w._scan()
    return h.w.slots
