"""Replicas across one broker's log dirs, as their writers keep them
(``writer_local.py``): the follower's copy from the leader's files, its
truncation to the leader's log, the leader's HW from its followers' slots,
the cut-back of a copy the leader moved under, the leader's dir failing
under a follower, catch-up without sleeping, a follower slot counted only
from its dir's writer, the log dir probe (only with hb-logdirs, only for a
dir gone), the reopen, and an offline replica's slot placement.

Two real writers' methods (log dirs 0 and 1, ids 1 and 2) share a real
partition table, ISR commit table, log dir table and admin lock, driven a
round step at a time; only the rings and doorbells are stand-ins. The
leader's epoch moving in the middle of a copy cannot be timed for real in
one process, so the test moves it from inside the copy (a wrapper of the
follower's real ``append_copy``).
"""

from __future__ import annotations

import itertools
import os
import types

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.config import LogConfig
from hostbroker.log.dirids import DIR_ID_FILE
from hostbroker.log.epochs import EPOCH_FILE, format_entries
from hostbroker.log.logdir import LogDir
from hostbroker.log.message import encode_message_set
from hostbroker.log.partition import PartitionLog
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.adminlock import AdminLock
from hostbroker.shm.logdirs import LogDirTable
from hostbroker.shm.partitions import IsrCommitTable, PartitionTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers import envelopes as env
from hostbroker.workers import writer_local, writer_replicas
from hostbroker.workers.base import now_ms
from hostbroker.workers.flusher import Flusher
from hostbroker.workers.writer import WriterWorker
from hostbroker.workers.writer_polls import _NEVER
from tests.workers import test_writer_deletes as deletes
from tests.workers.test_writer_deletes import FAR, run_flush_job
from tests.workers.test_writer_replicas import Clock, Ring

IDS = (1, 2)  # the log dir ids of dirs 0 and 1
LEAD, FOLLOW = 0, 1  # their slots, in the order of IDS
_runs = itertools.count()


class Bell:
    """Stands in for a doorbell: counts its rings."""

    def __init__(self):
        self.rung = 0

    def ring(self):
        self.rung += 1

    def wake(self, needed=None):
        self.rung += 1


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(writer_replicas, "now_ms", c)
    monkeypatch.setattr(writer_local, "now_ms", c)
    return c


@pytest.fixture
def pair(tmp_path, clock):
    token = f"l{os.getpid()}n{next(_runs)}"
    table = PartitionTable.create(region_name(token, "partitions", 0), 8)
    commits = IsrCommitTable.create(region_name(token, "isr_commits", 0), 8)
    logdirs = LogDirTable.create(region_name(token, "logdirs", 0), list(IDS))
    lock = AdminLock.create(timeout=2.0)
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    writers = []
    for index, path in enumerate(dirs):
        os.mkdir(path)
        with open(os.path.join(path, DIR_ID_FILE), "w") as f:
            f.write(f"{IDS[index]}\n")
        writers.append(_writer(index, path, dirs, table, commits, logdirs, lock, clock))
    yield writers
    for w in writers:
        w._local_forget(FOLLOW)
        w.logdir.close()
    table.close()
    commits.close()
    logdirs.close()
    lock.remove()
    remove_stale(broker_prefix(token))


def _writer(index, path, dirs, table, commits, logdirs, lock, clock):
    w = WriterWorker.__new__(WriterWorker)
    w.index, w.path = index, path
    w.plan = types.SimpleNamespace(log_dirs=dirs)
    w.defaults = LogConfig()
    w.table, w.lock = table, lock
    w.logdir = LogDir.open(path, w.defaults, now_ms)
    w.offline, w.appended = False, 0
    w.slots, w.published, w.dirty, w.waiters = {}, {}, set(), []
    w.flushing, w.undeletable, w.retention_stuck = {}, {}, set()
    w.direct, w.waiters_answered = [], set()
    w.senders = [deletes.Recorder()]
    w.answer_rings = []
    w.flusher = Flusher(deletes.Bell())
    w.counted = []
    w.count = lambda counter, n=1: w.counted.append((counter, n))
    w.wait_ns = 0
    w.broker_id = 0
    w.books, w.isr_pending, w.start_hws, w.hw_checkpoint = {}, set(), {}, None
    w.leading = set()
    w.lag_ms, w.lag_bytes = 10_000, 1 << 20
    w.isr_check_ms = clock() + 1000
    w.isr_commits = commits
    w.rres, w.replica_bell = Ring(), Ring()
    w.polls, w.polls_held, w.polls_new, w.polls_deadline = {}, 0, set(), _NEVER
    w.max_polls, w.max_response_bytes = 10, 1 << 20
    # what _init_local sets up, with stand-in doorbells
    w.local_following, w.local_sources, w.local_epochs = set(), {}, {}
    w.local_leading = set()
    w.local_bases, w.local_backoff, w.local_restarts = {}, {}, {}
    w.writer_bells = {0: Bell(), 1: Bell()}
    w.local_recheck_ms = 0
    w.fetch_max_bytes, w.fetch_backoff_ms = 1 << 20, 1000
    w.check_interval_ms = 200
    w.next_probe_ms = clock()
    w.logdirs = logdirs
    w.logdirs_bell = Bell()
    w.dir_marks = w._dir_marks()
    return w


def create(pair, topic="r", config=None):
    """What hb-logdirs' create does: a partition dir on each log dir, marked
    placed on log dirs, and a slot for each replica claimed STOPPED."""
    for w in pair:
        PartitionLog.create(w.path, topic, 0, 1, config or {}, w.defaults, now_ms,
                            replicated=True, placement="log_dirs").close()
        w.table.claim_replica(w.index, list(IDS), placement=ptable.PLACEMENT_LOG_DIRS,
                              state=ptable.ONLINE, name=topic, partition=0, owner=w.index,
                              start_offset=0, end_offset=0, flushed_offset=0,
                              segment_generation=1)


def state(w, role, epoch, leader=IDS[0], topic="r", isr=IDS, **extra):
    slot = w.index
    request = {"slot": slot, "topic": topic, "partition": 0, "role": role, "leader": leader,
               "leader_epoch": epoch, "isr": list(isr), "isr_version": 0,
               "replicas": list(IDS), "delete": False, "config": None,
               "placement": "log_dirs", "replica_slots": {str(i): s for s, i in enumerate(IDS)},
               "leader_slot": ptable.NO_SLOT if role != "follower" else IDS.index(leader),
               **extra}
    return w._replica_state(request)


def produce(w, token, data, acks=-1, topic="r"):
    out = []
    head, body = env.encode_append(token, w.index, topic, 0, 0, acks, 1, FAR, data)
    w._append(0, memoryview(head + body), out, set())
    w._publish(w.index, w.slots[w.index])
    return out


def follow(w):
    touched = set()
    w._follow_local(touched)
    for slot in touched:
        w._publish(slot, w.slots[slot])
    return touched


def lead_round(w, clock):
    w._local_positions(clock(), set(w.leading))
    moved = w._replicas_round(clock())
    w._answer_waiters()
    return moved


def files(w):
    path = w.slots[w.index].path
    return {n: open(os.path.join(path, n), "rb").read()
            for n in sorted(os.listdir(path)) if n.endswith(".kafka")}


def test_a_follower_copies_and_the_leader_answers_acks_all_from_its_slot(pair, clock):
    lead, fol = pair
    create(pair)
    assert state(lead, "leader", 1) == {"error": 0}
    assert state(fol, "follower", 1) == {"error": 0}
    assert lead.books[LEAD].me == 1 and fol.books[FOLLOW].me == 2
    assert fol.table.read(FOLLOW).leader_slot == LEAD
    data = encode_message_set([b"m" * 100, b"n" * 100])
    produce(lead, 7, data)
    lead._flush([LEAD])
    run_flush_job(lead)
    assert lead.senders[0].results == []  # the follower has not copied it
    lead_round(lead, clock)
    assert lead.senders[0].results == []
    assert follow(fol) == {FOLLOW}
    assert fol.table.read(FOLLOW).fetch_epoch == 1
    assert fol.writer_bells[LEAD].rung == 1  # the leader's writer is rung
    assert files(fol) == files(lead)
    assert lead_round(lead, clock) == {LEAD}
    assert lead.senders[0].results == [(7, ErrorCode.NONE, 0, len(data))]
    assert lead.table.read(LEAD).high_watermark == len(data)
    follow(fol)  # the follower takes the leader's HW
    assert fol.table.read(FOLLOW).high_watermark == len(data)


def test_a_follower_copies_segment_by_segment(pair, clock):
    lead, fol = pair
    create(pair, config={"segment.bytes": "1024"})
    state(lead, "leader", 1)
    state(fol, "follower", 1)
    for i in range(30):
        produce(lead, i, encode_message_set([b"%02d" % i * 40]), acks=1)
    assert len(lead.slots[LEAD].segment_bases) > 2
    for _ in range(40):
        if not follow(fol):
            break
    assert fol.slots[FOLLOW].log_end_offset == lead.slots[LEAD].log_end_offset
    assert files(fol) == files(lead)


def test_a_follower_far_behind_catches_up_in_whole_entries(pair, clock):
    lead, fol = pair
    create(pair)
    state(lead, "leader", 1)
    state(fol, "follower", 1)
    fol.fetch_max_bytes = 250
    for i in range(10):
        produce(lead, i, encode_message_set([b"c" * 90]), acks=1)
    rounds = 0
    while fol.slots[FOLLOW].log_end_offset < lead.slots[LEAD].log_end_offset:
        assert follow(fol)
        rounds += 1
    assert rounds > 3 and files(fol) == files(lead)


def test_a_follower_cuts_what_the_new_leader_never_had(pair, clock):
    """Dir 1 led epoch 1 and appended what nobody copied; dir 0 leads epoch
    2: dir 1 cuts its log to where epoch 1 ends in dir 0's, then copies."""
    lead, fol = pair
    create(pair)
    shared = encode_message_set([b"s" * 60])
    state(fol, "leader", 1, leader=IDS[1])
    produce(fol, 1, shared, acks=1)
    state(lead, "follower", 1, leader=IDS[1])
    follow(lead)  # dir 0 copies the shared entry
    produce(fol, 2, encode_message_set([b"lost" * 30]), acks=1)  # never copied
    assert state(lead, "leader", 2) == {"error": 0}
    produce(lead, 3, encode_message_set([b"new" * 20]), acks=1)
    assert state(fol, "follower", 2) == {"error": 0}
    assert fol.table.read(FOLLOW).fetch_epoch == -1
    follow(fol)
    assert fol.table.read(FOLLOW).fetch_epoch == 2
    assert files(fol) == files(lead)
    assert fol.books[FOLLOW].epochs.entries == lead.books[LEAD].epochs.entries


def test_a_copy_the_leader_moved_under_is_cut_back(pair, clock):
    lead, fol = pair
    create(pair)
    state(lead, "leader", 1)
    state(fol, "follower", 1)
    produce(lead, 1, encode_message_set([b"a" * 50]), acks=1)
    follow(fol)
    produce(lead, 2, encode_message_set([b"b" * 50]), acks=1)
    plog = fol.slots[FOLLOW]
    real = plog.append_copy
    before = plog.log_end_offset

    def copy_then_leader_moves(*args, **kwargs):
        got = real(*args, **kwargs)
        state(lead, "leader", 2)  # a new epoch while the copy ran
        return got

    plog.append_copy = copy_then_leader_moves
    follow(fol)
    del plog.append_copy
    assert plog.log_end_offset == before  # the copy was undone
    assert fol.table.read(FOLLOW).fetch_epoch == -1
    assert fol.table.read(FOLLOW).end_offset == before
    state(fol, "follower", 2)
    follow(fol)
    assert files(fol) == files(lead)


def test_the_leaders_dir_failing_is_not_the_followers(pair, clock):
    lead, fol = pair
    create(pair, config={"segment.bytes": "1024"})
    state(lead, "leader", 1)
    state(fol, "follower", 1)
    for i in range(12):
        produce(lead, i, encode_message_set([b"f" * 200]), acks=1)
    bases = lead.slots[LEAD].segment_bases
    os.unlink(lead.slots[LEAD].segment_path(bases[0]))  # the leader's file is gone
    assert not follow(fol)
    assert not fol.offline and fol.table.read(FOLLOW).state == ptable.ONLINE
    assert FOLLOW in fol.local_backoff
    assert any(c == writer_local.procs.ERRORS for c, _ in fol.counted)
    clock.ms += 5  # within the backoff: not tried again
    assert not follow(fol)


def test_a_leader_only_counts_a_follower_cut_to_its_epoch(pair, clock):
    lead, fol = pair
    create(pair)
    state(lead, "leader", 3)
    state(fol, "follower", 3)
    produce(lead, 1, encode_message_set([b"q" * 10]))
    lead._flush([LEAD])
    run_flush_job(lead)
    # the follower's slot says its end is the leader's, but not cut in epoch 3
    fol.table.write(FOLLOW, end_offset=lead.slots[LEAD].log_end_offset, fetch_epoch=2)
    lead_round(lead, clock)
    assert lead.table.read(LEAD).high_watermark == 0
    assert lead.senders[0].results == []


def test_a_cluster_state_is_refused_for_a_dir_placed_replica(pair, clock):
    lead, _ = pair
    create(pair)
    got = lead._replica_state({"slot": LEAD, "topic": "r", "partition": 0, "role": "leader",
                               "leader": 0, "leader_epoch": 1, "isr": [0], "replicas": [0]})
    assert got["error"] == ErrorCode.INVALID_REQUEST and "placed on log dirs" in got["message"]
    bad = state(lead, "leader", 1, replica_slots={"1": 99})
    assert bad["error"] == ErrorCode.INVALID_REQUEST
    assert lead.table.read(LEAD).role == ptable.ROLE_STOPPED


def test_a_replaced_or_removed_log_dir_goes_offline_at_the_probe(pair, clock):
    lead, fol = pair
    create(pair)
    state(lead, "leader", 1)
    lead._probe_dir(clock())
    assert not lead.offline
    os.rename(lead.path, lead.path + ".old")  # pulled, and another disk mounted there
    os.mkdir(lead.path)
    clock.ms += 200
    lead._probe_dir(clock())
    assert lead.offline and lead.table.read(LEAD).state == ptable.OFFLINE
    assert 0 in lead.table.offline_log_dirs()
    assert lead.logdirs_bell.rung == 1  # hb-logdirs hears of it at once
    os.rmdir(lead.path)
    os.rename(lead.path + ".old", lead.path)
    # an id file replaced whole (another dir's) is noticed too
    id_file = os.path.join(fol.path, DIR_ID_FILE)
    os.replace(id_file, id_file + ".x")
    with open(id_file, "w") as f:
        f.write("9\n")
    fol.next_probe_ms = 0
    fol._probe_dir(clock())
    assert fol.offline


def test_an_offline_writer_exits_to_reopen_its_dir(pair, clock):
    lead, fol = pair
    assert lead._dir_reopen({"dir_id": 1}) == {"error": 0, "reopening": False}
    assert lead.reopen_exit is None
    lead._go_offline(OSError(5, "Input/output error"))
    assert lead._dir_reopen({"dir_id": 1}) == {"error": 0, "reopening": True}
    assert lead.reopen_exit == writer_local.EXIT_REOPEN and lead.stopping
    assert lead._dir_reopen({"dir": 1})["error"] == ErrorCode.INVALID_REQUEST


def test_the_cut_follows_a_crafted_leader_epoch_file_over_several_questions(pair, clock):
    """The follower's epochs are 1 then 3; the leader's file (crafted) says
    1, 2 then 4. Asked about 3, the leader answers 2; the follower has no
    2 and asks about 1, which ends where the follower's 3 began: it cuts
    there, then copies the leader's epochs 1, 2 and 4 in turn."""
    lead, fol = pair
    create(pair)
    a = encode_message_set([b"a" * 40])
    size = len(a)
    state(fol, "leader", 1, leader=IDS[1])
    produce(fol, 1, a, acks=1)
    state(fol, "leader", 3, leader=IDS[1])
    for body in (b"b", b"c"):
        produce(fol, 2, encode_message_set([body * 40]), acks=1)
    assert fol.books[FOLLOW].epochs.entries == ((1, 0), (3, size))
    state(lead, "leader", 2)
    for body in (b"a", b"x", b"y"):
        produce(lead, 3, encode_message_set([body * 40]), acks=1)
    state(lead, "leader", 4)
    produce(lead, 4, encode_message_set([b"z" * 40]), acks=1)
    assert lead.table.read(LEAD).epoch_start == 3 * size
    crafted = ((1, 0), (2, 2 * size), (4, 3 * size))
    with open(os.path.join(lead.slots[LEAD].path, EPOCH_FILE), "wb") as f:
        f.write(format_entries(crafted))
    state(fol, "follower", 4)
    follow(fol)
    assert fol.table.read(FOLLOW).fetch_epoch == 4
    for _ in range(5):
        if not follow(fol):
            break
    assert files(fol) == files(lead)
    assert fol.books[FOLLOW].epochs.entries == crafted


def test_only_a_removed_dir_fails_the_probe(pair, clock, monkeypatch, capsys):
    """EMFILE, ENOMEM (or a StorageError caused by one) say nothing about
    the dir: logged once, tried again. ENOENT, ESTALE and EIO take it offline."""
    import errno

    from hostbroker.errors import StorageError

    lead, fol = pair
    failure = []

    def marks():
        raise failure[0]

    monkeypatch.setattr(lead, "_dir_marks", marks)
    for e in (OSError(errno.EMFILE, "Too many open files"),
              StorageError("cannot read log-dir-id: out of memory"),
              OSError(errno.ENOMEM, "Cannot allocate memory")):
        if isinstance(e, StorageError):
            e.__cause__ = OSError(errno.ENOMEM, "Cannot allocate memory")
        failure[:] = [e]
        clock.ms += 200
        lead._probe_dir(clock())
        assert not lead.offline
    assert capsys.readouterr().err.count("cannot probe log dir") == 1
    assert lead.logdirs_bell.rung == 0
    failure[:] = [OSError(errno.ESTALE, "Stale file handle")]
    clock.ms += 200
    lead._probe_dir(clock())
    assert lead.offline and lead.logdirs_bell.rung == 1
    # a link in place of the id file is another id, not a passing failure
    os.replace(os.path.join(fol.path, DIR_ID_FILE), os.path.join(fol.path, "id.old"))
    os.symlink(os.path.join(fol.path, "id.old"), os.path.join(fol.path, DIR_ID_FILE))
    fol.next_probe_ms = 0
    fol._probe_dir(clock())
    assert fol.offline


def test_a_writer_without_hb_logdirs_neither_probes_nor_reads_the_id(pair, clock):
    """One log dir, or cluster mode: nothing would reopen a dir the probe
    took offline, so there is no probe, and a bad id file is not read."""
    lead, _ = pair
    with open(os.path.join(lead.path, DIR_ID_FILE), "w") as f:
        f.write("not an id\n")
    lead.plan = types.SimpleNamespace(log_dirs=lead.plan.log_dirs, logdirs=False)
    lead.config = {"replica.fetch.max.bytes": 1 << 20, "replica.fetch.backoff.ms": 1000,
                   "log.dir.check.interval.ms": 200}
    lead._init_local()
    assert not lead.offline and lead.logdir is not None
    assert lead.dir_marks is None and lead.logdirs is None
    os.rename(lead.path, lead.path + ".old")
    clock.ms += 1000
    lead._probe_dir(clock())
    os.rename(lead.path + ".old", lead.path)
    assert not lead.offline


def test_a_leader_counts_a_follower_slot_only_if_its_dir_s_writer_owns_it(pair, clock,
                                                                         tmp_path):
    """A slot named in replica_slots but owned by another writer (freed
    and claimed again since) is not that replica's position: neither one of
    the leader's own writer, nor one of a third dir's writer."""
    lead, fol = pair
    create(pair)
    state(lead, "leader", 1)
    state(fol, "follower", 1)
    data = encode_message_set([b"o" * 30])
    produce(lead, 1, data)
    lead._flush([LEAD])
    run_flush_job(lead)
    # a third log dir (id 3, writer 2) beside the two
    token = f"l{os.getpid()}n{next(_runs)}"
    three = LogDirTable.create(region_name(token, "logdirs", 0), [*IDS, 3])
    lead.logdirs, lead.local_dir_index = three, {}
    try:
        for owner in (LEAD, 2):
            # a slot of this partition's name, owned by another writer than the
            # follower's dir's, looking like a follower cut to this epoch at the end
            other = lead.table.find_free()
            lead.table.claim_replica(other, list(IDS), placement=ptable.PLACEMENT_LOG_DIRS,
                                     state=ptable.ONLINE, name="r", partition=0, owner=owner,
                                     start_offset=0, end_offset=len(data),
                                     flushed_offset=len(data))
            lead.table.write(other, fetch_epoch=1)
            lead.books[LEAD].replica_slots = {IDS[0]: LEAD, IDS[1]: other}
            lead_round(lead, clock)
            assert lead.table.read(LEAD).high_watermark == 0, owner
            assert lead.senders[0].results == []
            lead.table.free(other)
        lead.books[LEAD].replica_slots = {IDS[0]: LEAD, IDS[1]: FOLLOW}
        follow(fol)
        lead_round(lead, clock)
        assert lead.table.read(LEAD).high_watermark == len(data)
    finally:
        three.close()
        remove_stale(broker_prefix(token))


def test_a_leader_of_no_dir_placed_book_reads_no_slot_for_it(pair, clock, monkeypatch):
    """_local_positions runs every writer cycle: it walks the dir-placed books
    that lead, never the cluster ones."""
    lead, fol = pair
    create(pair)
    state(lead, "leader", 1)
    state(fol, "follower", 1)
    assert lead.local_leading == {LEAD}

    class Untouchable(set):
        def __iter__(self):
            raise AssertionError("the leading books walked")

    lead.leading = Untouchable(lead.leading | set(range(100, 2100)))  # cluster leaders
    lead._local_positions(clock(), set())
    state(lead, "follower", 2, leader=IDS[1])
    assert lead.local_leading == set()
    state(lead, "leader", 3)
    assert lead.local_leading == {LEAD}
    lead._drop_book(LEAD)
    assert lead.local_leading == set()


def test_a_follower_behind_copies_again_without_waiting_for_the_recheck(pair, clock):
    lead, fol = pair
    create(pair)
    state(lead, "leader", 1)
    state(fol, "follower", 1)
    fol.fetch_max_bytes = 250
    for i in range(10):
        produce(lead, i, encode_message_set([b"c" * 90]), acks=1)
    fol.next_probe_ms = clock() + 10_000
    follow(fol)
    assert fol.slots[FOLLOW].log_end_offset < lead.slots[LEAD].log_end_offset
    assert fol._local_timeout_ms() <= clock()  # the loop does not sleep
    for _ in range(20):  # (900 bytes, 250 a round)
        if fol.slots[FOLLOW].log_end_offset >= lead.slots[LEAD].log_end_offset:
            break
        follow(fol)
    assert fol.slots[FOLLOW].log_end_offset == lead.slots[LEAD].log_end_offset
    follow(fol)  # caught up: back to the recheck
    assert fol._local_timeout_ms() == clock() + writer_local.LOCAL_FOLLOW_RECHECK_MS


def test_an_offline_replica_s_new_slot_says_it_is_placed_on_log_dirs(pair, clock):
    """hb-logdirs finds replicas by their slots' placement: one registered
    offline in a new slot must say it, or it is taken for lost."""
    lead, _ = pair
    create(pair)
    plain = PartitionLog.create(lead.path, "plain", 0, 1, {}, lead.defaults, now_ms)
    plain.close()
    for topic, placement in (("r", ptable.PLACEMENT_LOG_DIRS),
                             ("plain", ptable.PLACEMENT_BROKERS)):
        slot = lead.table.find_free()
        lead._register_offline(None, topic, 0)  # (a partition it could not open)
        s = lead.table.read(slot)
        assert (s.state, s.name, s.owner, s.placement) == (ptable.OFFLINE, topic, LEAD,
                                                           placement)


def test_exit_reopen_is_defined_once():
    import pathlib
    import re

    import hostbroker

    root = pathlib.Path(hostbroker.__file__).parent
    found = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
             if re.search(r"^EXIT_REOPEN\s*=", p.read_text(), re.M)]
    assert found == ["workers/base.py"]


def test_a_cut_that_fails_takes_the_dir_offline_once(pair, clock, monkeypatch, capsys):
    """A follower's own disk failing in the cut: one line, one ERRORS, one
    offline flag (the cut has taken the dir offline; the round only stops)."""
    lead, fol = pair
    create(pair)
    state(fol, "leader", 1, leader=IDS[1])
    produce(fol, 1, encode_message_set([b"s" * 60]), acks=1)
    state(lead, "follower", 1, leader=IDS[1])
    follow(lead)
    produce(fol, 2, encode_message_set([b"lost" * 30]), acks=1)  # never copied: cut later
    state(lead, "leader", 2)
    produce(lead, 3, encode_message_set([b"new" * 20]), acks=1)
    state(fol, "follower", 2)
    capsys.readouterr()

    def broken(offset):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fol.books[FOLLOW].plog, "truncate_to", broken)
    follow(fol)
    assert fol.offline
    assert capsys.readouterr().err.count("failed") == 1
    assert len([c for c in fol.counted if c[0] == procs.ERRORS]) == 1
