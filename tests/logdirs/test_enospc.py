"""A log dir that fills up for real: one broker on two big dirs and a 4 MiB
tmpfs. The leader of a partition of replication factor 2 is moved onto the
tmpfs; an acks=-1 producer runs until the tmpfs is full (ENOSPC). The
leadership moves to the replica on a big dir (within ``MOVE_BUDGET_S`` of the
first STORAGE_ERROR, a budget for a loaded machine: the 1 s target is
tools/bench/logdirs.py's), every acknowledged message reads back, and ``top``
and METADATA v2 show the dir offline and the partition under-replicated. With
space freed and ``logdirs online``, the replica on the tmpfs truncates,
catches up and rejoins the ISR, its files equal to the leader's."""

from __future__ import annotations

import os

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.shm.partitions import ROLE_LEADER
from tests.logdirs.support import (
    DIR_OFFLINE,
    DIR_ONLINE,
    MOVE_BUDGET_S,
    WAIT_S,
    AckedLog,
    assert_all_acked,
    create,
    dir_states,
    leader_dir,
    logdirs,
    poll,
    read_back,
    reassign,
    replica_slots,
    slots_said,
    top_json,
    wait_leader_moved,
    wait_replicas_equal,
)

TOPIC = "full"
BALLAST = 2 << 20  # freed after the failure: room for the replica to catch up
# acknowledged after the failure is seen, at most (and the round under way): what the
# replica on the tmpfs must copy when it comes back fits in the ballast whatever the
# machine's load made of the timing
AFTER_FAILURE = 200_000


@pytest.fixture(scope="module")
def broker(dirs_broker):
    return dirs_broker(3, small="4m")


@pytest.fixture(scope="module")
def seen():
    """What the first test saw, for the second (one broker, in order)."""
    return {}


def test_a_full_dir_moves_its_leadership(broker, seen, tmp_path):
    small = os.path.abspath(broker.small)
    bigs = [os.path.abspath(d) for d in broker.dirs[:2]]
    create(broker, TOPIC, 1, 2, "segment.bytes=1048576")
    leader = leader_dir(broker, TOPIC, 0)
    if leader != small:  # the leader leaves: the first target in the ISR leads
        keep = [d for d in bigs if d != leader][0]
        reassign(broker, tmp_path, "execute", {(TOPIC, 0): [small, keep]})
        poll(lambda: reassign(broker, tmp_path, "verify", {(TOPIC, 0): [small, keep]},
                              check=False).returncode == 0, WAIT_S, "the move done")
        poll(lambda: leader_dir(broker, TOPIC, 0) == small, WAIT_S, "the leader on the tmpfs")
    with open(os.path.join(small, "ballast"), "wb") as f:
        f.write(b"\0" * BALLAST)

    log = AckedLog(broker, TOPIC, 1, chunk=50, size=1000, max_bytes=64 << 20)
    log.start()
    poll(lambda: log.first_error(ErrorCode.STORAGE_ERROR) is not None or log.fatal, WAIT_S,
         "the tmpfs full (STORAGE_ERROR)", every=0.01)
    log.limit(AFTER_FAILURE)
    failed_at = log.first_error(ErrorCode.STORAGE_ERROR)
    assert failed_at is not None, repr(log.fatal)
    new_leader, moved_at = wait_leader_moved(broker, TOPIC, 0, small)
    assert new_leader in bigs
    assert moved_at - failed_at < MOVE_BUDGET_S, \
        f"the leader moved {moved_at - failed_at:.3f} s after ENOSPC"
    # acknowledged again past the failure (the full dir acknowledges nothing more), and
    # stopped soon after (log.limit): the replica on the tmpfs must find room for what
    # the new leader took meanwhile when it comes back
    poll(lambda: log.acked_after(failed_at) is not None, WAIT_S,
         "an acknowledgement from the new leader")
    log.stop()
    assert_all_acked(log, read_back(broker, TOPIC))

    reading = top_json(broker)
    assert small in reading["offline_log_dirs"]
    assert [TOPIC, 0] in reading["under_replicated_partitions"]
    states = {d["path"]: d["state"] for d in reading["log_dirs"]}
    assert states[small] != states[new_leader]  # offline, beside an online dir
    assert dir_states(broker)[small] == DIR_OFFLINE
    seen.update(log=log, small=small, leader=new_leader)


def test_the_dir_brought_back_truncates_catches_up_and_rejoins(broker, seen):
    if not seen:
        pytest.skip("needs the full dir of the test before")
    small = seen["small"]
    os.remove(os.path.join(small, "ballast"))
    logdirs(broker, "online", "--log-dir", small)
    try:
        poll(lambda: dir_states(broker)[small] == DIR_ONLINE, WAIT_S,
             "METADATA v2: the dir online")
    except AssertionError as e:
        raise AssertionError(f"{e}: {dir_states(broker)}\n{broker.log()[-3000:]}") from None

    def rejoined() -> bool:
        slots = [s for _, s in replica_slots(broker, TOPIC, 0)]
        return any(s.role == ROLE_LEADER and len(s.isr_ids) == 2 for s in slots)

    try:
        poll(rejoined, WAIT_S, "the tmpfs replica back in the ISR")
    except AssertionError as e:
        free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
        raise AssertionError(f"{e}; {free} bytes free on the tmpfs:\n"
                             f"{slots_said(broker, TOPIC, 0)}\n{broker.log()[-1500:]}") from None
    wait_replicas_equal(broker, TOPIC, 0)
    assert_all_acked(seen["log"], read_back(broker, TOPIC))
    assert [TOPIC, 0] not in top_json(broker)["under_replicated_partitions"]
