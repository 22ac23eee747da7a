"""Moving replicas between the log dirs of a running broker with ``hostbroker
reassign --bootstrap`` while an acks=-1 producer runs: the leader moved off
its dir, the replication factor taken from 2 to 3 and back to 2, ``verify``
saying ``done``, the old replica's dir gone, every acknowledged message read
back; and a second move refused while one runs."""

from __future__ import annotations

import os
import signal

import pytest

from tests.logdirs.support import (
    AckedLog,
    assert_all_acked,
    create,
    leader_dir,
    moved,
    poll,
    read_back,
    reassign,
    replica_dirs,
    slots_said,
    wait_replicas_equal,
)

TOPIC = "mv"


@pytest.fixture(scope="module")
def broker(dirs_broker):
    # a writer stopped on purpose (SIGSTOP) is not replaced meanwhile
    return dirs_broker(3, **{"worker.heartbeat.timeout.ms": 30000})


def _done(broker, tmp_path, moves) -> bool:
    done = reassign(broker, tmp_path, "verify", moves, check=False)
    return done.returncode == 0 and "done" in done.stdout.decode()


def test_reassign_under_load_moves_the_leader_and_changes_the_factor(broker, tmp_path):
    dirs = [os.path.abspath(d) for d in broker.dirs]
    create(broker, TOPIC, 1, 2)
    log = AckedLog(broker, TOPIC, 1, size=200, pause=0.005, max_bytes=8 << 20)
    log.start()
    log.wait_acked(300)

    leader = leader_dir(broker, TOPIC, 0)
    (spare,) = set(dirs) - replica_dirs(broker, TOPIC, 0)
    (stays,) = replica_dirs(broker, TOPIC, 0) - {leader}
    moves = [[spare, stays], dirs, [stays, leader]]  # leader off its dir; RF 2 -> 3 -> 2
    for target in moves:
        plan = {(TOPIC, 0): target}
        reassign(broker, tmp_path, "execute", plan)
        poll(lambda target=target: moved(broker, TOPIC, 0, target), 30, f"the move to {target}")
        assert _done(broker, tmp_path, plan)
        poll(lambda target=target: replica_dirs(broker, TOPIC, 0) == set(target), 10,
             f"the replicas on {target} only")
        if target == moves[0]:  # the leader left its dir: the first target leads
            assert leader_dir(broker, TOPIC, 0) == spare
        assert leader_dir(broker, TOPIC, 0) in target
        for d in set(dirs) - set(target):
            poll(lambda d=d: not os.path.exists(os.path.join(d, f"{TOPIC}_0")), 10,
                 f"the replica in {d} deleted")
        log.wait_acked(len(log.acked) + 100)
    log.stop()
    assert_all_acked(log, read_back(broker, TOPIC))
    wait_replicas_equal(broker, TOPIC, 0)


def test_a_second_move_is_refused_while_one_runs(broker, tmp_path):
    create(broker, "first", 1, 2)
    create(broker, "second", 1, 2)
    dirs = [os.path.abspath(d) for d in broker.dirs]
    (spare,) = set(dirs) - replica_dirs(broker, "first", 0)
    kept = sorted(replica_dirs(broker, "first", 0))[0]
    # the new replica's writer stopped: the move cannot end until it runs again
    writer = f"hb-writer-{dirs.index(spare)}"
    pid = broker.workers()[writer]
    os.kill(pid, signal.SIGSTOP)
    try:
        reassign(broker, tmp_path, "execute", {("first", 0): [kept, spare]})
        other = sorted(replica_dirs(broker, "second", 0))
        refused = reassign(broker, tmp_path, "execute", {("second", 0): other[::-1]},
                           check=False)
        assert refused.returncode == 1
        assert "a reassignment is in progress" in refused.stderr.decode()
        verify = reassign(broker, tmp_path, "verify", {("first", 0): [kept, spare]}, check=False)
        assert verify.returncode == 1 and "in progress" in verify.stdout.decode()
    finally:
        os.kill(pid, signal.SIGCONT)
    poll(lambda: moved(broker, "first", 0, [kept, spare]), 30, "the move done")
    assert _done(broker, tmp_path, {("first", 0): [kept, spare]})
    try:
        poll(lambda: replica_dirs(broker, "first", 0) == {kept, spare}, 10,
             "first's replicas on the two dirs of the plan only")
    except AssertionError as e:
        raise AssertionError(f"{e}; kept {kept}, spare {spare}, second {other}:\n"
                             f"{slots_said(broker, 'first', 0)}") from None
