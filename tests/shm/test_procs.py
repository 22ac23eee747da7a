import json
import os
import subprocess
import sys
import time

import pytest

from hostbroker.shm import procs
from hostbroker.shm.procs import BrokerState, ProcessBoard, WorkerState
from tests.shm.procutil import fork, wait_ok


@pytest.fixture
def board(created):
    return created(ProcessBoard, "procs", 4)


def test_a_new_board(board):
    assert board.broker_state == BrokerState.STARTING
    assert board.supervisor_pid == os.getpid()
    assert abs(board.start_time_ns - time.time_ns()) < 60e9
    assert board.snapshot() == []
    board.set_broker_state(procs.BROKER_RUNNING)
    assert board.broker_state == BrokerState.RUNNING
    board.set_supervisor(1)
    assert board.supervisor_pid == 1
    assert len(procs.COUNTER_NAMES) == procs.COUNTER_COUNT == 20


def test_worker_writes_its_slot(board):
    board.set_worker(2, kind=3, index=1, pid=4242, epoch=7)
    board.add(2, procs.REQUESTS)
    board.add(2, procs.BYTES_IN, 1000)
    board.set(2, procs.RING_OCCUPANCY, 64)
    board.set_state(2, WorkerState.READY)
    board.heartbeat(2, now_ns=123)
    [row] = board.snapshot()
    assert row["slot"] == 2 and row["state"] == WorkerState.READY
    assert (row["kind"], row["index"], row["pid"], row["epoch"], row["heartbeat_ns"]) == (3, 1, 4242, 7, 123)
    assert board.epoch(2) == 7 and board.state(2) == procs.WORKER_READY
    assert row["counters"]["requests"] == 1 and row["counters"]["bytes_in"] == 1000
    assert row["counters"]["ring_occupancy"] == 64 and board.get(2, procs.BYTES_OUT) == 0
    board.set_worker(2, kind=3, index=1, pid=4243, epoch=8)  # restarted: counters start over
    assert board.get(2, procs.REQUESTS) == 0 and board.heartbeat_ns(2) > 123
    with pytest.raises(IndexError):
        board.add(2, procs.COUNTER_COUNT)
    with pytest.raises(IndexError):
        board.heartbeat(4)


def test_a_slots_counters_and_its_peers_epochs_read_directly(board):
    for slot, epoch in ((0, 5), (1, 6), (3, 9)):
        board.set_worker(slot, kind=1, index=slot, pid=100 + slot, epoch=epoch)
    counters = board.counters(1)
    assert len(counters) == procs.COUNTER_COUNT
    counters[procs.BYTES_OUT] += 7
    board.add(1, procs.BYTES_OUT, 3)
    assert board.get(1, procs.BYTES_OUT) == counters[procs.BYTES_OUT] == 10
    assert board.get(0, procs.BYTES_OUT) == board.get(2, procs.BYTES_OUT) == 0
    assert sum(board.counters(0)) == sum(board.counters(2)) == 0
    epochs = board.epochs([3, 0, 1])
    assert epochs() == (9, 5, 6)
    board.set_worker(0, kind=1, index=0, pid=200, epoch=11)  # replaced
    assert epochs() == (9, 11, 6)
    assert board.epochs([1])() == (6,) and board.epochs([])() == ()


def _work(name, slot):
    board = ProcessBoard.attach(name)
    board.set_state(slot, WorkerState.READY)
    for _ in range(10_000):
        board.add(slot, procs.MESSAGES_IN, 3)
    board.heartbeat(slot)


def test_counts_from_worker_processes(board):
    pids = []
    for slot in range(4):
        board.set_worker(slot, kind=1, index=slot, pid=0, epoch=1)
        pids.append(fork(_work, board.name, slot))
    for pid in pids:
        wait_ok(pid)
    assert [row["counters"]["messages_in"] for row in board.snapshot()] == [30_000] * 4


_MONITOR = """
import json, sys
from hostbroker.shm.procs import ProcessBoard
board = ProcessBoard.attach(sys.argv[1], readonly=True)
try:
    board.heartbeat(0)
except TypeError:
    pass
else:
    raise SystemExit("a read-only board took a write")
rows = board.snapshot()
for row in rows:
    row["state"] = int(row["state"])
print(json.dumps({"state": int(board.broker_state), "pid": board.supervisor_pid, "rows": rows}))
"""


def test_a_monitor_started_later_attaches_read_only(board):
    board.set_broker_state(BrokerState.DRAINING)
    board.set_worker(1, kind=2, index=0, pid=os.getpid(), epoch=3)
    board.add(1, procs.ERRORS, 5)
    out = subprocess.run([sys.executable, "-c", _MONITOR, board.name], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["state"] == BrokerState.DRAINING and seen["pid"] == os.getpid()
    [row] = seen["rows"]
    assert row["slot"] == 1 and row["epoch"] == 3 and row["counters"]["errors"] == 5
