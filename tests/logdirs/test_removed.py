"""A log dir pulled from under a running broker: one of three dirs is a tmpfs,
unmounted (``umount -l``) while an acks=-1 producer runs. Writes may still
succeed on the lazily unmounted filesystem, so only the writers' probe
(``log.dir.check.interval.ms``) finds it: every leadership on it moves (within
the check interval and ``MOVE_BUDGET_S``, a budget for a loaded machine: the
1 s target is tools/bench/logdirs.py's), every acknowledged message reads back,
and METADATA v2 shows the dir offline."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.logdirs.support import (
    DIR_OFFLINE,
    CHECK_INTERVAL_MS,
    MOVE_BUDGET_S,
    WAIT_S,
    AckedLog,
    assert_all_acked,
    create,
    dir_states,
    leader_dir,
    poll,
    read_back,
    reassign,
    replica_dirs,
    wait_leader_moved,
)

TOPIC = "pulled"
PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(dirs_broker):
    return dirs_broker(3, small="16m")


def test_a_removed_dir_is_found_and_its_leaderships_move(broker, tmp_path):
    small = os.path.abspath(broker.small)
    create(broker, TOPIC, PARTITIONS, 2)
    led = [p for p in range(PARTITIONS) if leader_dir(broker, TOPIC, p) == small]
    if not led:  # make one: partition 0 led from the tmpfs
        other = [d for d in replica_dirs(broker, TOPIC, 0) if d != small][0]
        reassign(broker, tmp_path, "execute", {(TOPIC, 0): [small, other]})
        poll(lambda: leader_dir(broker, TOPIC, 0) == small, WAIT_S,
             "partition 0 led from the tmpfs")
        led = [0]

    log = AckedLog(broker, TOPIC, PARTITIONS, size=200, max_bytes=8 << 20)
    log.start()
    log.wait_acked(300, WAIT_S)
    pulled_at = time.monotonic()
    subprocess.run(["umount", "-l", small], check=True, timeout=30)
    budget = CHECK_INTERVAL_MS / 1000 + MOVE_BUDGET_S
    for p in led:
        _, moved_at = wait_leader_moved(broker, TOPIC, p, small)
        assert moved_at - pulled_at < budget, \
            f"{TOPIC}-{p} moved {moved_at - pulled_at:.3f} s after the dir was removed"
    log.wait_acked(len(log.acked) + 300, WAIT_S)
    log.stop()
    assert_all_acked(log, read_back(broker, TOPIC))
    assert dir_states(broker)[small] == DIR_OFFLINE
