"""hb-logdirs driven pass by pass: creation, failover, state file durability, ISR
commits, an uncertain state file, deletion and strays.

A real partition table, log dir table, ISR commit table, admin lock and log
dirs (three tmp dirs); the state files are really written. The writers are not
running: their rings are stand-ins that keep what hb-logdirs sends, the process
board is a stand-in whose writer states a test sets, and a test plays the
writer's part in the table where it matters (a slot that leads, an ISR wanted).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import threading
import time
from types import SimpleNamespace

import pytest

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.log.partition import PartitionLog
from hostbroker.replication.localstate import decode_state
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.logdirs import LD_OFFLINE, LogDirTable
from hostbroker.shm.partitions import IsrCommitTable, PartitionTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.logdirs import LogDirsWorker
from hostbroker.workers.logdirs.model import Document, Part
from hostbroker.workers.logdirs.statefile import STATE_FILE

_runs = itertools.count()
IDS = [1, 2, 3]


class Ring:
    def __init__(self):
        self.sent = []

    def send(self, *parts):
        self.sent.append(b"".join(bytes(p) for p in parts))

    def pump(self):
        return True

    def pending(self):
        return False

    def take(self):
        out = [(env.decode_op(m)[0], env.decode_op(m)[1], env.decode_json(m)) for m in self.sent]
        self.sent = []
        return out


class Bell:
    def wake(self, needed=None):
        pass

    def ring(self):
        pass


class Board:
    """The process board as hb-logdirs reads it: writer states and epochs."""

    def __init__(self, n):
        self.states = [procs.WORKER_READY] * n
        self.epochs = [1] * n

    def read(self, i):
        return SimpleNamespace(state=self.states[i])

    def epoch(self, i):
        return self.epochs[i]


class Harness:
    def __init__(self, tmp_path, dir_ids=IDS, **settings):
        self.token = f"ld{os.getpid()}n{next(_runs)}"
        self.paths = []
        for i in range(len(dir_ids)):
            path = tmp_path / f"d{i}"
            path.mkdir(exist_ok=True)
            self.paths.append(str(path))
        self.table = PartitionTable.create(region_name(self.token, "partitions", 0), 32)
        self.commits = IsrCommitTable.create(region_name(self.token, "isr_commits", 0), 32)
        self.dirtable = LogDirTable.create(region_name(self.token, "logdirs", 0), dir_ids)
        self.lock = AdminLock.create(timeout=2.0)
        self.board = Board(len(dir_ids))
        # a state file write here is an fsync on tmp: on a loaded machine one can take
        # longer than the default 200 ms, which would fail the dir (no test here is of that)
        overrides = {"log.dirs": ",".join(self.paths), "logdirs.writer.grace.ms": 0,
                     "logdirs.state.write.timeout.ms": 5000, **settings}
        self.config = Config.build(overrides=[f"{k}={v}" for k, v in overrides.items()])
        self.rings = [Ring() for _ in dir_ids]
        self.answers = Ring()
        self.start()

    def start(self):
        """A (new) hb-logdirs over the same tables and dirs."""
        w = LogDirsWorker.__new__(LogDirsWorker)
        w.plan = SimpleNamespace(log_dirs=self.paths, num_writers=len(self.paths))
        w.config = self.config
        w.table, w.dirtable, w.commits, w.lock = self.table, self.dirtable, self.commits, self.lock
        w.board = self.board
        w.writer_slots = list(range(len(self.paths)))
        w.to_writers = self.rings
        w.writer_bells = [Bell() for _ in self.paths]
        w.results, w.requests = [], []
        w.answers, w.handler_bells = [self.answers], [Bell()]
        w.setup()
        w.isr.wakers = {i: Bell() for i in range(len(self.paths))}
        self.w = w
        return w

    def close(self):
        self.w.writers.close()
        for t in (self.table, self.commits, self.dirtable):
            t.close()
        self.lock.remove()
        remove_stale(broker_prefix(self.token))

    # -- playing the writers' part -------------------------------------------
    def states(self):
        """{(topic, p, dir id): the last OP_REPLICA_STATE sent} and, per writer, the
        order sent: [(writer, key, body)]."""
        got, order = {}, []
        for w, ring in enumerate(self.rings):
            for op, token, body in ring.take():
                if op == env.OP_REPLICA_STATE:
                    key = (body["topic"], body["partition"], self.dirtable.dir_id(w))
                    got[key] = body
                    order.append((w, key, body))
        return got, order

    def apply(self, got):
        """The writers take their roles (as writer_replicas does, in the slot)."""
        roles = {"leader": ptable.ROLE_LEADER, "follower": ptable.ROLE_FOLLOWER,
                 "stopped": ptable.ROLE_STOPPED}
        for (topic, p, d), body in got.items():
            if body.get("delete"):
                self.table.free(body["slot"])
                continue
            bits = ptable.isr_bits(body["replicas"], body["isr"])
            self.table.write(body["slot"], role=roles[body["role"]], leader=body["leader"],
                             leader_epoch=body["leader_epoch"], isr=bits, isr_wanted=bits,
                             **ptable.replica_fields(body["replicas"]))

    def copy(self, i):
        return decode_state(open(os.path.join(self.paths[i], STATE_FILE), "rb").read(), "x")


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def online(h, path, token=77):
    """``logdirs online``: its answer, or None when it waits for the writer (reopen
    sent). The dir is read by a thread; the loop goes on once it has."""
    answer = h.w._online(0, token, path)
    if answer is not None:
        return answer
    for look in list(h.w.looking.values()):
        assert look.finished.wait(5)
    h.w._online_round(time.monotonic())
    got = h.answers.take()
    return got[0][2] if got else None


def create(h, topic="t", partitions=2, rf=2, config=None):
    answer = h.w._create(topic, partitions, rf, config or {})
    if answer is None:  # made over several rounds (logdirs.create.round.ms): answered on dans
        while h.w.creating:
            h.w._creations_round(time.monotonic() + 1.0)
        ((_, _, answer),) = h.answers.take()
    assert answer["error"] == ErrorCode.NONE, answer
    h.w._pass(0.0)
    got, order = h.states()
    h.apply(got)
    return got, order


def test_a_created_topic_is_durable_everywhere_before_its_replicas_exist(h):
    got, order = create(h, partitions=3, rf=2)
    for i in range(3):
        copy = h.copy(i)
        assert set(copy.online) == set(IDS)
        assert sorted(copy.topics["t"].partitions) == [0, 1, 2]
    doc = h.w.doc
    # balanced: 6 replicas on 3 dirs, two each; one leader per dir
    counts = {d: sum(d in part.replicas for part in doc.parts.values()) for d in IDS}
    assert counts == {1: 2, 2: 2, 3: 2}
    assert sorted(part.replicas[0] for part in doc.parts.values()) == IDS
    for (topic, p), part in doc.parts.items():
        assert part.leader == part.replicas[0] and part.isr == part.replicas
        for d in part.replicas:
            body = got[(topic, p, d)]
            assert body["placement"] == "log_dirs"
            assert set(body["replica_slots"]) == {str(r) for r in part.replicas}
            assert body["role"] == ("leader" if d == part.leader else "follower")
            slot = body["slot"]
            s = h.table.read(slot)
            assert s.placement == ptable.PLACEMENT_LOG_DIRS
            assert h.dirtable.dir_id(s.owner) == d
            if body["role"] == "follower":
                assert body["leader_slot"] == body["replica_slots"][str(part.leader)]
            meta = json.load(open(os.path.join(h.paths[s.owner], f"t_{p}", "partition.json")))
            assert meta.get("placement") == "log_dirs"
    # each writer is told its leaders first
    for w in range(3):
        ranks = [body["role"] for to, _, body in order if to == w]
        assert ranks == sorted(ranks, key=lambda r: r != "leader")
    # nothing more to say while nothing changes
    h.w._pass(0.0)
    assert h.states()[0] == {}


def test_refusals(h):
    assert h.w._create("r", 1, 4, {})["error"] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "needs 4 usable log dirs" in h.w._create("r", 1, 4, {})["message"]
    answer = h.w._create("r", 1, 2, {"min.insync.replicas": "3"})
    assert answer["error"] == ErrorCode.INVALID_CONFIG
    assert answer["message"] == "min.insync.replicas 3 is more than the replication factor 2"
    create(h, "r", 1, 2)
    assert h.w._create("r", 1, 2, {})["error"] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert h.w._create("r", 1, 9, {})["error"] == ErrorCode.INVALID_REPLICATION_FACTOR


def test_a_dir_that_fails_loses_its_leaderships_to_the_isr_and_leaves_the_copies(h):
    create(h, partitions=3, rf=2)
    gen = h.table.generation
    led = {tp for tp, part in h.w.doc.parts.items() if part.leader == 1}
    assert led
    h.table.set_log_dir_offline(0)  # the writer of dir 1 met an I/O error
    h.w._pass(0.0)
    got, order = h.states()
    for tp, part in h.w.doc.parts.items():
        assert part.leader != 1 and 1 not in part.isr
        if tp in led:
            assert part.leader_epoch == 1
            assert got[(tp[0], tp[1], part.leader)]["role"] == "leader"
    assert h.table.generation > gen
    for i in (1, 2):
        assert set(h.copy(i).online) == {2, 3}
    assert set(h.copy(0).online) == {1, 2, 3}  # (not written: offline)
    assert h.dirtable.read(0).state == LD_OFFLINE


def test_a_writer_not_ready_past_the_grace_counts_as_failed(h):
    create(h, partitions=1, rf=3)
    leader = h.w.doc.parts[("t", 0)].leader
    h.board.states[h.dirtable.index_of(leader)] = procs.WORKER_STARTING
    h.w._pass(0.0)  # grace 0: gone at once
    part = h.w.doc.parts[("t", 0)]
    assert part.leader != leader and leader not in part.isr
    # it comes back READY with a new epoch: told again, as a follower
    h.board.states[h.dirtable.index_of(leader)] = procs.WORKER_READY
    h.board.epochs[h.dirtable.index_of(leader)] += 1
    h.states()
    h.w._writers_replaced()
    # what it was sent died with its ring: nothing is waited for from it
    assert not [what for what in h.w.pending.values() if what[0] == "state"
                and what[1][2] == leader]
    h.w._pass(0.0)
    got, _ = h.states()
    assert got[("t", 0, leader)]["role"] == "follower"


def test_a_dir_whose_state_write_fails_leaves_live(h, tmp_path):
    create(h, partitions=3, rf=2)
    os.rename(h.paths[2], str(tmp_path / "gone"))  # dir 3's writes fail for real
    led = {tp for tp, part in h.w.doc.parts.items() if part.leader == 3}
    assert not h.w.write_doc()  # (the next change's write)
    assert 3 in h.w.write_failed
    h.w._pass(0.0)
    for tp, part in h.w.doc.parts.items():
        assert part.leader != 3 and 3 not in part.isr
    assert set(h.copy(0).online) == {1, 2}
    assert led
    # it comes back: the next write takes it, and it is live again
    os.rename(str(tmp_path / "gone"), h.paths[2])
    h.w.write_doc()
    assert 3 not in h.w.write_failed


def test_an_isr_change_is_durable_before_the_commit(h):
    create(h, partitions=1, rf=3)
    part = h.w.doc.parts[("t", 0)]
    slot = h.w.slots[("t", 0)][part.leader]
    s = h.table.read(slot)
    wanted = [part.leader, part.replicas[1]]
    h.table.write(slot, isr_wanted=ptable.isr_bits(s.replicas, wanted))
    version = part.version
    h.w.isr.poll()
    assert sorted(h.w.doc.parts[("t", 0)].isr) == sorted(wanted)
    assert h.w.doc.parts[("t", 0)].version == version + 1
    assert sorted(h.copy(0).topics["t"].partitions[0].isr) == sorted(wanted)
    assert h.commits.read(slot).commit_version == version + 1


def test_an_uncertain_state_keeps_leaderless_the_partitions_that_name_a_missing_dir(h):
    create(h, partitions=3, rf=2)
    for i in range(3):
        h.copy(i)
    h.w.writers.close()
    # restart with dir 3 missing: its disk is gone, an empty mount point in its place
    # (no id file: the start gave it no id here), offline; the copies name 3 online
    os.remove(os.path.join(h.paths[2], STATE_FILE))
    h.dirtable.fill([1, 2, -1])
    h.table.set_log_dir_offline(2)
    w = h.start()
    assert w.blocked == {3}
    w._pass(0.0)
    w.admin_round(0.0)
    assert h.states()[0] == {} or all(  # (no stray deleted while uncertain)
        not body.get("delete") for body in h.states()[0].values())
    for tp, part in w.doc.parts.items():
        if 3 in part.isr:
            assert part.leader == -1
        else:
            assert part.leader != -1
    # the operator consents
    assert w._forget(3)["error"] == ErrorCode.NONE
    w._pass(0.0)
    assert all(part.leader in (1, 2) for part in w.doc.parts.values())


def test_delete_then_strays(h):
    create(h, "gone", partitions=2, rf=2)
    assert h.w._delete("gone")["error"] == ErrorCode.NONE
    assert h.copy(0).deleting == ("gone",)
    got, _ = h.states()
    assert len(got) == 4 and all(body["delete"] for body in got.values())
    for (topic, p, d), body in got.items():
        h.w.admin_answered(("delete", topic, body["slot"]), 0, {"error": 0})
    h.apply(got)
    h.w._scan()
    h.w.admin_round(0.0)
    assert "gone" not in h.w.doc.configs and h.copy(0).deleting == ()
    # a replica the document does not assign: deleted while certain
    PartitionLog.create(h.paths[0], "stray", 0, 1, {}, h.w.defaults, now_ms, replicated=True,
                        placement="log_dirs").close()
    slot = h.table.find_free()
    h.table.claim_replica(slot, [1, 2], state=ptable.ONLINE, name="stray", partition=0, owner=0,
                          placement=ptable.PLACEMENT_LOG_DIRS)
    h.w._scan()
    h.w.admin_round(0.0)
    got, _ = h.states()
    assert got[("stray", 0, 1)]["delete"] is True


def test_the_document_encodes_to_what_the_decoder_accepts():
    doc = Document(seq=4, online=[1, 2], dirs={1: "/a", 2: "/b"}, configs={"t": {"k": "v"}},
                   parts={("t", 0): Part([1, 2], 1, 3, [1, 2], 7, [2, 1])}, deleting=[])
    state = decode_state(doc.encode(), "x")
    assert state.topics["t"].partitions[0].target == (2, 1)
    assert Document.from_state(state) == doc


def test_a_reassignment_moves_the_leader_off_a_dir_then_drops_the_old_replica(h):
    create(h, partitions=1, rf=2)
    part = h.w.doc.parts[("t", 0)]
    old, kept = part.replicas
    new = ({1, 2, 3} - {old, kept}).pop()
    assert h.w._alter([["t", 0, [new, kept]]])["error"] == ErrorCode.NONE
    assert h.w._alter([["t", 0, [kept, new]]])["message"] == "a reassignment is in progress"
    assert h.copy(0).topics["t"].partitions[0].target == (new, kept)
    h.w._pass(0.0)
    got, _ = h.states()
    assert got[("t", 0, new)]["role"] == "follower"
    h.apply(got)
    # the new replica caught up: its leader asks it into the ISR
    slot = h.w.slots[("t", 0)][old]
    s = h.table.read(slot)
    h.table.write(slot, isr_wanted=ptable.isr_bits(s.replicas, [old, kept, new]))
    h.w.isr.poll()
    h.w.admin_round(0.0)  # the leader leaves its dir
    part = h.w.doc.parts[("t", 0)]
    assert part.leader == new and part.leader_epoch == 1
    h.w.admin_round(0.0)  # the move is done
    assert part.replicas == [new, kept] and part.target == [] and old not in part.isr
    h.w._pass(0.0)
    h.w.admin_round(0.0)
    got, _ = h.states()
    assert got[("t", 0, old)]["delete"] is True
    assert got[("t", 0, new)]["role"] == "leader"


def test_a_dir_whose_id_file_is_bad_but_holds_a_copy_is_not_missing(h):
    create(h, partitions=2, rf=2)
    h.w.writers.close()
    h.dirtable.fill([1, -1, 3])  # dir 2's id file was unreadable at start
    h.table.set_log_dir_offline(1)
    w = h.start()
    assert w.blocked == set()
    w._pass(0.0)
    for part in w.doc.parts.values():
        assert part.leader in (1, 3) and 2 not in part.isr
    # listed under its id, offline, and written no copy
    assert h.dirtable.dir_id(1) == 2 and h.dirtable.read(1).state == LD_OFFLINE
    assert 2 not in h.copy(0).online


def test_a_new_disk_taken_online_gets_a_new_id_and_its_writer_a_reopen(h, tmp_path):
    from hostbroker.log.dirids import read_dir_id, write_dir_id

    create(h, partitions=1, rf=2)
    for i, path in enumerate(h.paths):
        write_dir_id(path, IDS[i])
    h.table.set_log_dir_offline(2)  # dir 3 died; an empty disk is mounted there
    os.rename(h.paths[2], str(tmp_path / "dead"))
    os.mkdir(h.paths[2])
    assert online(h, h.paths[2]) is None  # answered once the writer is back
    assert read_dir_id(h.paths[2]) == 4 and h.dirtable.dir_id(2) == 4
    sent = h.rings[2].take()
    assert [(op, body) for op, _, body in sent] == [(env.OP_DIR_REOPEN, {"dir_id": 4})]
    # the writer's replacement is READY: answered
    h.board.epochs[2] += 1
    h.w._writers_replaced()
    h.table.set_log_dir_offline(2, False)
    h.w.admin_round(0.0)
    (_, token, answer), = h.answers.take()
    assert token == 77 and answer["error"] == ErrorCode.NONE
    # a dir with another id than the one this broker had there is refused
    write_dir_id(h.paths[1], 9)
    h.table.set_log_dir_offline(1)
    answer = online(h, h.paths[1], 78)
    assert answer["message"] == (f"log dir {h.paths[1]} holds id 9, this broker had id 2 "
                                 "there: restart to take it")
    assert h.w._online(0, 79, "/nowhere")["error"] == ErrorCode.LOG_DIR_NOT_FOUND


def _restart_without_copy_of_dir_3(h, how):
    """Stop hb-logdirs after a change, spoil dir 3's copy ``how``, start again."""
    from hostbroker.log.dirids import write_dir_id

    create(h, partitions=3, rf=2)
    for i, path in enumerate(h.paths):
        write_dir_id(path, IDS[i])
    h.w.writers.close()
    name = os.path.join(h.paths[2], STATE_FILE)
    kept = open(name, "rb").read()
    os.remove(name)
    if how == "garbled":
        with open(name, "wb") as f:
            f.write(b'{"version": 1, "seq": ')
    elif how == "link":
        os.symlink(os.path.join(h.paths[0], STATE_FILE), name)
    elif how == "dir":
        os.mkdir(name)
    return h.start(), name, kept


@pytest.mark.parametrize("how", ["garbled", "missing", "link", "dir"])
def test_a_copy_that_cannot_be_decoded_is_not_there(h, how):
    # dir 3 is configured and holds its id, but its copy is not usable: it may have
    # been newer, so the start is uncertain (nothing elected from an ISR naming
    # it), its copy is not written over, and it stays out until `logdirs online`
    w, name, kept = _restart_without_copy_of_dir_3(h, how)
    assert w.blocked == {3} and 2 in w.unidentified
    w._pass(0.0)
    w.admin_round(0.0)
    for part in w.doc.parts.values():
        assert (part.leader == -1) == (3 in part.isr)
    assert 3 not in w.live_dirs(0.0) and 3 not in h.copy(0).online
    if how == "garbled":
        assert open(name, "rb").read() == b'{"version": 1, "seq": '
    # still unreadable: `logdirs online` refuses and says how to go on
    answer = online(h, h.paths[2])
    assert answer["error"] == ErrorCode.STORAGE_ERROR, answer
    assert "holds no readable state file" in answer["message"]
    assert "logdirs forget --log-dir-id 3" in answer["message"]
    assert w.blocked == {3}
    assert env.OP_DIR_REOPEN not in [op for op, _, _ in h.rings[2].take()]
    # the operator puts the copy back (the one of the last change): taken back
    if how == "dir":
        os.rmdir(name)
    elif os.path.lexists(name):
        os.remove(name)
    with open(name, "wb") as f:
        f.write(kept)
    assert online(h, h.paths[2]) is None
    assert w.blocked == set() and 2 not in w.unidentified
    assert [op for op, _, _ in h.rings[2].take()][-1] == env.OP_DIR_REOPEN


def test_forget_takes_an_unreadable_copy_as_lost(h):
    w, _, _ = _restart_without_copy_of_dir_3(h, "garbled")
    assert w._forget(3)["error"] == ErrorCode.NONE
    w._pass(0.0)
    assert all(part.leader in (1, 2) for part in w.doc.parts.values())
    assert online(h, h.paths[2]) is None  # then it comes back as any dir does
    assert 2 not in w.unidentified


def _back_with(h, seq_step):
    """Dir 3 missing at start (not mounted); then it is mounted again holding a
    copy ``seq_step`` after the one this broker started from."""
    from dataclasses import replace

    from hostbroker.log.dirids import write_dir_id
    from hostbroker.replication.localstate import encode_state

    create(h, partitions=3, rf=2)
    h.w.writers.close()
    started = h.copy(2)
    os.remove(os.path.join(h.paths[2], STATE_FILE))
    h.dirtable.fill([1, 2, -1])
    h.table.set_log_dir_offline(2)
    w = h.start()
    assert w.blocked == {3} and w.start_seq == started.seq
    w._pass(0.0)
    h.states()
    write_dir_id(h.paths[2], 3)
    with open(os.path.join(h.paths[2], STATE_FILE), "wb") as f:
        f.write(encode_state(replace(started, seq=started.seq + seq_step)))
    return w, started


def test_a_returning_dir_holding_a_newer_copy_stays_out(h):
    w, started = _back_with(h, 5)
    for _ in range(6):
        w.write_doc()  # (changes made meanwhile: this broker's seq passed it)
    answer = online(h, h.paths[2])
    assert answer["error"] == ErrorCode.INVALID_REQUEST, answer
    assert f"holds a newer state file (seq {started.seq + 5})" in answer["message"]
    # still blocked, not reopened, and its copy not written over
    assert w.blocked == {3} and h.rings[2].take() == []
    w.write_doc()
    assert h.copy(2).seq == started.seq + 5 and 3 not in h.copy(0).online


def test_a_returning_dir_holding_the_same_copy_is_taken_back(h):
    w, _ = _back_with(h, 0)
    assert online(h, h.paths[2]) is None
    assert w.blocked == set() and h.dirtable.dir_id(2) == 3
    assert [op for op, _, _ in h.rings[2].take()] == [env.OP_DIR_REOPEN]


def test_a_new_ext4_disk_with_lost_and_found_is_taken(h, tmp_path):
    from hostbroker.log.dirids import read_dir_id

    create(h, partitions=1, rf=2)
    h.table.set_log_dir_offline(2)
    os.rename(h.paths[2], str(tmp_path / "dead"))
    os.mkdir(h.paths[2])
    os.mkdir(os.path.join(h.paths[2], "lost+found"))
    assert online(h, h.paths[2]) is None
    assert read_dir_id(h.paths[2]) == 4
    # a dir holding a partition dir but no id is still refused
    h.table.set_log_dir_offline(1)
    assert not os.path.exists(os.path.join(h.paths[1], "log-dir-id"))
    os.makedirs(os.path.join(h.paths[1], "t_0"), exist_ok=True)
    answer = online(h, h.paths[1], 78)
    assert answer["message"] == (f"log dir {h.paths[1]} holds partitions but no log dir id: "
                                 "restart to take it")


def test_a_hung_dir_never_stalls_the_loop(h, monkeypatch):
    from hostbroker.log import dirids
    from hostbroker.workers.logdirs import admin

    create(h, partitions=1, rf=2)
    h.table.set_log_dir_offline(2)
    release = threading.Event()

    def hung(path):
        release.wait(10)
        return 3

    monkeypatch.setattr(dirids, "read_dir_id", hung)
    monkeypatch.setattr(admin, "ONLINE_LOOK_S", 0.2)
    t0 = time.monotonic()
    assert h.w._online(0, 77, h.paths[2]) is None
    assert time.monotonic() - t0 < 1.0  # the loop went on
    h.w.admin_round(time.monotonic())
    assert h.answers.take() == []
    h.w.admin_round(time.monotonic() + 1.0)  # past the bound: answered
    (_, token, answer), = h.answers.take()
    assert token == 77 and answer["error"] == ErrorCode.STORAGE_ERROR
    assert "did not answer" in answer["message"]
    # asked again while the read still hangs: refused at once
    assert "still being read" in h.w._online(0, 78, h.paths[2])["message"]
    release.set()
    for look in list(h.w.looking.values()):
        assert look.finished.wait(5)
    h.w.admin_round(time.monotonic())
    assert h.w.looking == {} and h.answers.take() == []
    assert h.rings[2].take() == []  # (the late read is not acted on)


def test_a_leader_is_told_again_when_only_a_follower_s_slot_moves(h):
    """The lost-replica path gives a replica a new slot with nothing else
    changed: its leader must learn the slot, or it reads a freed one."""
    create(h, partitions=1, rf=2)
    part = h.w.doc.parts[("t", 0)]
    follower = next(d for d in part.replicas if d != part.leader)
    old = h.w.slots[("t", 0)][follower]
    s = h.table.read(old)
    new = h.table.find_free()
    h.table.claim_replica(new, list(s.replicas), placement=ptable.PLACEMENT_LOG_DIRS,
                          state=ptable.ONLINE, name="t", partition=0, owner=s.owner,
                          start_offset=0, end_offset=0, flushed_offset=0)
    h.table.free(old)
    h.w._pass(0.0)
    got, _ = h.states()
    told = got[("t", 0, part.leader)]
    assert told["role"] == "leader" and told["replica_slots"][str(follower)] == new
    assert got[("t", 0, follower)]["slot"] == new


def test_placement_never_stats_a_dir_after_the_start(h, monkeypatch):
    """A hung disk must not stall hb-logdirs: devices come from the start."""
    h.w.plan.dir_devices = [11, 11, 12]
    assert [h.w.device_of(d) for d in IDS] == [11, 11, 12]
    assert h.w.device_of(99) == -1

    real, statted = os.stat, []

    def spy(path, *args, **kwargs):
        if str(path).rstrip("/") in h.paths:
            statted.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", spy)
    create(h, "u", partitions=2, rf=2)
    assert statted == []
    # distinct devices first: each partition has a replica on dir 3 (device 12)
    assert all(3 in h.w.doc.parts[("u", p)].replicas for p in range(2))


def test_what_a_deleted_topic_s_replicas_were_told_is_forgotten(h):
    for round_ in range(3):  # the same name, slots and dirs each time: told again each time
        got, _ = create(h, "churn", partitions=2, rf=2)
        assert len(got) == 4, round_
        assert {k[0] for k in h.w.sent} == {"churn"}
        assert h.w._delete("churn")["error"] == ErrorCode.NONE
        got, _ = h.states()
        for token, what in list(h.w.pending.items()):
            if what[0] == "delete":
                h.w.pending.pop(token)
                h.w.writer_answered(what, 0, {"error": 0})
        h.apply(got)
        for path, p in itertools.product(h.paths, range(2)):  # (as the writers delete)
            shutil.rmtree(os.path.join(path, f"churn_{p}"), ignore_errors=True)
        h.w._pass(0.0)  # (a round: the answers, the pass, the admin)
        h.w.admin_round(0.0)
        assert "churn" not in h.w.doc.configs
        assert not h.w.sent and not h.w.refused and not h.w.strays_told and not h.w.lost_tried


def test_what_was_told_to_a_replica_whose_slot_was_freed_is_forgotten_at_the_next_pass(h):
    create(h, "t", partitions=1, rf=2)
    h.w.refused[("t", 0, 1)] = (("leader",), 0.0)
    h.w.lost_tried[("x", 0, 1)] = 0
    h.w.strays_told[(9, "x", 0)] = 0
    for slot in h.w.slots[("t", 0)].values():
        h.table.free(slot)
    h.w._pass(0.0)
    assert not h.w.sent and not h.w.refused and not h.w.strays_told and not h.w.lost_tried


def _want_isr(h, tp, isr):
    """The leader of ``tp`` wants ``isr`` (as its writer publishes it)."""
    part = h.w.doc.parts[tp]
    slot = h.w.slots[tp][part.leader]
    s = h.table.read(slot)
    h.table.write(slot, isr_wanted=ptable.isr_bits(s.replicas, isr))
    return slot


def _count_writes(h):
    writes = []
    real = h.w.writers.write_bytes

    def counted(data, ids):
        writes.append(len(data))
        return real(data, ids)

    h.w.writers.write_bytes = counted
    return writes


def test_the_isr_changes_of_one_poll_are_written_once(h):
    create(h, partitions=3, rf=3)
    slots = {}
    for tp, part in h.w.doc.parts.items():
        slots[tp] = _want_isr(h, tp, [part.leader])
    versions = {tp: part.version for tp, part in h.w.doc.parts.items()}
    writes = _count_writes(h)
    h.w.isr.poll()
    assert len(writes) == 1
    for tp, part in h.w.doc.parts.items():
        assert part.isr == [part.leader] and part.version == versions[tp] + 1
        assert h.copy(0).topics["t"].partitions[tp[1]].isr == (part.leader,)
        assert h.commits.read(slots[tp]).commit_version == versions[tp] + 1


def test_the_isr_changes_of_a_poll_not_written_are_all_undone(h):
    create(h, partitions=2, rf=3)
    before = {tp: (list(part.isr), part.version) for tp, part in h.w.doc.parts.items()}
    slots = {tp: _want_isr(h, tp, [part.leader]) for tp, part in h.w.doc.parts.items()}
    h.w.writers.write_bytes = lambda data, ids: set()  # no dir takes the write
    h.w.isr.poll()
    assert {tp: (part.isr, part.version) for tp, part in h.w.doc.parts.items()} == before
    assert all(h.commits.read(slot).commit_version == 0 for slot in slots.values())


def test_a_pass_reads_no_plain_slot(h, monkeypatch):
    create(h, partitions=2, rf=2)
    for i in range(20):  # plain partitions, created as a handler does (generation bumped)
        slot = h.table.find_free()
        h.table.write(slot, state=ptable.ONLINE, name=f"plain{i}", partition=0, owner=i % 3,
                      start_offset=0, end_offset=0, flushed_offset=0)
    h.table.bump_generation()
    h.w._pass(0.0)  # the whole table, once
    read, scans = [], []
    real_read, real_scan = h.table.read, h.table.scan
    monkeypatch.setattr(h.table, "read", lambda i: read.append(i) or real_read(i))
    monkeypatch.setattr(h.table, "scan", lambda: scans.append(1) or real_scan())
    for _ in range(3):
        h.w._pass(0.0)
        h.w.isr.poll()
    assert not scans and set(read) == set(h.w.slot_states) and len(h.w.slot_states) == 4
    # a dir-placed slot freed (its writer deleted it): seen without a generation bump
    freed = h.w.slots[("t", 1)][h.w.doc.parts[("t", 1)].replicas[1]]
    h.table.free(freed)
    h.w._pass(0.0)
    assert freed not in h.w.slot_states and len(scans) == 1
    # the generation moves (a slot claimed): the whole table again, once
    h.table.bump_generation()
    h.w._pass(0.0)
    h.w._pass(0.0)
    assert len(scans) == 2


def test_a_failover_with_the_admin_lock_busy_bumps_at_a_later_pass(h):
    create(h, partitions=3, rf=2)
    gen = h.table.generation
    h.lock.timeout = 0.05
    h.lock.acquire()  # held past admin.lock.timeout.ms (e.g. by a long ACL change)
    try:
        h.table.set_log_dir_offline(0)
        h.w._pass(0.0)  # decides, and cannot bump: no crash
        assert h.table.generation == gen and h.w.moved
    finally:
        h.lock.release()
    h.w._pass(1.0)
    assert h.table.generation > gen and not h.w.moved


def test_a_creation_with_the_admin_lock_busy_goes_on_at_a_later_round(h):
    h.lock.timeout = 0.05
    h.lock.acquire()  # held past admin.lock.timeout.ms
    try:
        assert h.w._create("t", 2, 2, {}) is None  # no crash: not made yet
        h.w._creations_round(time.monotonic() + 1.0)
        assert h.w.creating
    finally:
        h.lock.release()
    while h.w.creating:
        h.w._creations_round(time.monotonic() + 1.0)
    ((_, _, answer),) = h.answers.take()
    assert answer["error"] == ErrorCode.NONE, answer
