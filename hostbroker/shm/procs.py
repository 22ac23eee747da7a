"""The process board: which worker runs in each slot, its liveness and counters.

Owns: one shared table with a slot per worker process, plus broker-wide
facts in the table header. The supervisor creates it; each worker writes its
own slot's heartbeat, state and counters; a monitor (``hostbroker top``,
started at any time) attaches read-only and takes :meth:`ProcessBoard.snapshot`.

It is a :class:`~hostbroker.shm.table.SlotTable` of ``PROCESS_LAYOUT``. The
table header's user words hold::

    offset  size  field
    32      8     start_time_ns    wall clock (time.time_ns) when the board was created
    40      4     broker_state     BrokerState
    44      4     supervisor_pid

Worker slot (256 bytes)::

    offset  size  field
    0       8     seq              seqlock, used by set_worker only
    8       4     state            WorkerState
    12      4     kind             which kind of worker (numbers chosen by the caller)
    16      4     index            which one of its kind
    20      4     pid
    24      8     epoch            bumped by the supervisor at each (re)start of the slot
    32      8     heartbeat_ns     time.monotonic_ns() of the worker's last heartbeat
    40      4     sleeping         1 while the worker sleeps (or is about to) waiting
                                   for its doorbell; peers ring it only then
                                   (``hostbroker.shm.doorbell.Waker``)
    44      4     reserved
    48      160   counters         20 x u64, indexes below
    208     48    reserved

Writers: the supervisor fills a slot with :meth:`~ProcessBoard.set_worker`
(under the seqlock, so kind, index, pid and epoch are read together) only
while no worker runs in it; from then on the worker alone stores its state,
heartbeat and counters, each one aligned 8- or 4-byte store through a
``memoryview.cast`` (one instruction). Readers get each
value whole, but counters read together may be from slightly different
moments, which is fine for rates and gauges.
"""

from __future__ import annotations

import enum
import operator
import os
import time
from collections import namedtuple

from hostbroker.shm.region import SharedRegion
from hostbroker.shm.table import SlotLayout, SlotTable, TornSlotError

# The kind of process a board slot holds (its ``kind`` column), by name and back.
KIND_CODES = {"writer": 1, "handler": 2, "processor": 3, "acceptor": 4, "registrar": 5,
              "coordinator": 6, "replica": 7, "logdirs": 8, "http": 9}
KIND_NAMES = {code: kind for kind, code in KIND_CODES.items()}

# Counter indexes. Totals only grow; RING_OCCUPANCY and CONNECTIONS are gauges.
REQUESTS = 0
BYTES_IN = 1
BYTES_OUT = 2
ERRORS = 3
RING_OCCUPANCY = 4  # bytes waiting in the worker's input rings
CONNECTIONS = 5
MESSAGES_IN = 6
FETCH_PARKED = 7  # fetch requests waiting for data
RING_FULL = 8  # times a producer found a ring full
FLUSHES = 9
# Where the time goes (``hostbroker top``, tools/bench/latency.py):
WAIT_NS = 10  # ns records waited in this worker's input rings (enqueue to pickup)
WORK_NS = 11  # ns spent in loop cycles that had work
WAKEUPS = 12  # times the worker slept and was woken by its doorbell or a socket
BELLS_RUNG = 13  # peers' doorbells this worker rang
BELLS_SKIPPED = 14  # peers' doorbells not rung because the peer was awake
SPIN_HITS = 15  # times work arrived while the worker spun before sleeping
RING_APPENDS = 16  # message sets a writer appended straight from a request ring
BYTES_COPIED = 17  # request bytes a processor copied (to a ring or a connection's buffer)
# Writers of replicas: messages a follower appended from its leader (not in
# MESSAGES_IN, which counts produced messages only), and moves of a leader's
# high watermark; with MESSAGES_IN they say a fetch parked may look again.
REPLICA_MESSAGES_IN = 18
HW_MOVES = 19
COUNTER_COUNT = 20
LOG_MOVES = (MESSAGES_IN, REPLICA_MESSAGES_IN, HW_MOVES)
COUNTER_NAMES = (
    "requests",
    "bytes_in",
    "bytes_out",
    "errors",
    "ring_occupancy",
    "connections",
    "messages_in",
    "fetch_parked",
    "ring_full",
    "flushes",
    "wait_ns",
    "work_ns",
    "wakeups",
    "bells_rung",
    "bells_skipped",
    "spin_hits",
    "ring_appends",
    "bytes_copied",
    "replica_messages_in",
    "hw_moves",
)


class BrokerState(enum.IntEnum):
    STARTING = 1
    RUNNING = 2
    DRAINING = 3
    STOPPED = 4


class WorkerState(enum.IntEnum):
    EMPTY = 0
    STARTING = 1  # set by set_worker
    READY = 2  # set by the worker once it serves
    STOPPING = 3
    EXITED = 4


BROKER_STARTING = BrokerState.STARTING
BROKER_RUNNING = BrokerState.RUNNING
BROKER_DRAINING = BrokerState.DRAINING
BROKER_STOPPED = BrokerState.STOPPED
WORKER_EMPTY = WorkerState.EMPTY
WORKER_STARTING = WorkerState.STARTING
WORKER_READY = WorkerState.READY
WORKER_STOPPING = WorkerState.STOPPING
WORKER_EXITED = WorkerState.EXITED


WorkerSlot = namedtuple("WorkerSlot", "state kind index pid epoch heartbeat_ns counters")

PROCESS_LAYOUT = SlotLayout(
    b"PROC",
    WorkerSlot,
    [
        ("state", "I"),
        ("kind", "I"),
        ("index", "I"),
        ("pid", "I"),
        ("epoch", "Q"),
        ("heartbeat_ns", "Q"),
        ("_sleeping", "4x"),
        ("_reserved", "4x"),
        ("counters", f"{COUNTER_COUNT}Q"),
    ],
    slot_size=256,
)

_START_TIME = 32 // 8  # index into the table viewed as u64
_BROKER_STATE = 40 // 4  # index into the table viewed as u32
_SUPERVISOR_PID = 44 // 4
_STATE = 8  # byte offsets within a slot
_EPOCH = 24
_HEARTBEAT = 32
_SLEEPING = 40
_COUNTERS = 48


class ProcessBoard(SlotTable):
    """Liveness and counters of every worker process, one slot each."""

    LAYOUT = PROCESS_LAYOUT

    @classmethod
    def create(cls, region_or_name: SharedRegion | str, slots: int) -> ProcessBoard:
        """A board of empty slots, stamped with this (the supervisor's) pid and the time."""
        board = super().create(region_or_name, slots)
        board._u64[_START_TIME] = time.time_ns()
        board._u32[_SUPERVISOR_PID] = os.getpid()
        board._u32[_BROKER_STATE] = BrokerState.STARTING
        return board

    # -- broker-wide ------------------------------------------------------

    @property
    def start_time_ns(self) -> int:
        return self._u64[_START_TIME]

    @property
    def supervisor_pid(self) -> int:
        return self._u32[_SUPERVISOR_PID]

    def set_supervisor(self, pid: int) -> None:
        self._u32[_SUPERVISOR_PID] = pid

    @property
    def broker_state(self) -> BrokerState:
        return BrokerState(self._u32[_BROKER_STATE])

    def set_broker_state(self, state: BrokerState) -> None:
        self._u32[_BROKER_STATE] = BrokerState(state)

    # -- the supervisor, while slot i has no running worker ----------------

    def set_worker(self, i: int, kind: int, index: int, pid: int, epoch: int) -> None:
        """Record a (re)started worker in slot ``i``: state STARTING, counters zeroed."""
        self.write(
            i,
            state=WorkerState.STARTING,
            kind=kind,
            index=index,
            pid=pid,
            epoch=epoch,
            heartbeat_ns=time.monotonic_ns(),
            counters=(0,) * COUNTER_COUNT,
        )
        self._u32[self.sleeping_index(i)] = 0  # starts awake; peers ring it once it sleeps

    # -- the worker of slot i ---------------------------------------------

    def set_state(self, i: int, state: WorkerState) -> None:
        self._u32[(self._offset(i) + _STATE) >> 2] = WorkerState(state)

    def heartbeat(self, i: int, now_ns: int | None = None) -> None:
        """Say the worker is alive (``now_ns`` defaults to time.monotonic_ns())."""
        self._u64[(self._offset(i) + _HEARTBEAT) >> 3] = time.monotonic_ns() if now_ns is None else now_ns

    def sleeping_index(self, i: int) -> int:
        """Where slot ``i``'s sleeping flag is in :attr:`flags` (u32 words), for
        the hot paths that store or load it directly."""
        return (self._offset(i) + _SLEEPING) >> 2

    @property
    def flags(self) -> memoryview:
        """The board as u32 words; see :meth:`sleeping_index`."""
        return self._u32

    def counters(self, i: int) -> memoryview:
        """Slot ``i``'s counters as u64 words, indexed by counter: for the
        owner's hot paths, which add to them directly (as :meth:`add`)."""
        start = (self._offset(i) + _COUNTERS) >> 3
        return self._u64[start:start + COUNTER_COUNT]

    def epochs(self, slots: list[int]):
        """A function of no arguments giving the epochs of ``slots`` (a tuple,
        in that order) in one call: a worker looks at its peers' every loop."""
        at = [(self._offset(i) + _EPOCH) >> 3 for i in slots]
        if not at:
            return tuple
        pick = operator.itemgetter(*at)
        words = self._u64
        if len(at) == 1:
            return lambda: (pick(words),)
        return lambda: pick(words)

    def add(self, i: int, counter: int, n: int = 1) -> None:
        self._u64[self._counter_at(i, counter)] += n

    def set(self, i: int, counter: int, value: int) -> None:
        self._u64[self._counter_at(i, counter)] = value

    # -- anyone -----------------------------------------------------------

    def get(self, i: int, counter: int) -> int:
        return self._u64[self._counter_at(i, counter)]

    def heartbeat_ns(self, i: int) -> int:
        return self._u64[(self._offset(i) + _HEARTBEAT) >> 3]

    def epoch(self, i: int) -> int:
        """Slot ``i``'s epoch alone (one aligned load): a peer's restart shows as a change."""
        return self._u64[(self._offset(i) + _EPOCH) >> 3]

    def snapshot(self) -> list[dict]:
        """One dict per slot in use: slot, state, kind, index, pid, epoch,
        heartbeat_ns and counters (name -> value).

        A slot whose set_worker was cut short by the supervisor's death shows
        as ``{"slot": i, "torn": True}``.
        """
        rows = []
        for i in range(self.slot_count):
            if self.state(i) == WorkerState.EMPTY:
                continue
            try:
                slot = self.read(i)
            except TornSlotError:
                rows.append({"slot": i, "torn": True})
                continue
            row = slot._asdict()
            row["state"] = WorkerState(slot.state)
            row["counters"] = dict(zip(COUNTER_NAMES, slot.counters))
            rows.append({"slot": i, **row})
        return rows

    def _counter_at(self, i: int, counter: int) -> int:
        if not 0 <= counter < COUNTER_COUNT:
            raise IndexError(f"counter {counter} not in 0..{COUNTER_COUNT - 1}")
        return ((self._offset(i) + _COUNTERS) >> 3) + counter
