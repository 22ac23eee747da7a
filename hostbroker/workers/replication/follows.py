"""One follower partition's state in ``hb-replica``: where it stands in the
exchange with its leader.

Pure: no I/O. A :class:`Follow` is made for each FOLLOWER slot of the
partition table, for the leader and leader epoch the slot names, and goes::

    EPOCH ─► ASKING ─► TRUNCATING ─► FETCH ─► FETCHING ─► APPENDING
                                       ▲  ▲                   │
                                       │  └───────────────────┘
                                       └── RESTARTING ◄─ ASKING_START ◄─ START
    ASKING       OFFSET_FOR_LEADER_EPOCH at the leader (asking again: EPOCH)
    TRUNCATING   OP_TRUNCATE at the writer (skipped when nothing is cut)
    FETCHING     FETCH v1 at the leader (no whole entry came: FETCH again;
                 OFFSET_OUT_OF_RANGE with the leader's log end past ours: START)
    APPENDING    OP_REPLICA_APPEND at the writer
    ASKING_START OFFSETS (earliest) at the leader: its log start
    RESTARTING   OP_RESTART_LOG at the writer: the log emptied and started at
                 the leader's log start, when that is past our log end
    any error    BACKOFF for replica.fetch.backoff.ms, then EPOCH

A partition restarts its log at most once between two appends or backoffs:
an OFFSET_OUT_OF_RANGE right after a restart backs off first, so a leader
whose answers disagree cannot make it restart in a loop.

EPOCH is the start: before the first fetch of a leader epoch the log is cut
where it parts from the leader's (:mod:`.truncation`). One fetch at a time
per partition, and none while its append is at the writer, so every fetch
asks from the log end the writer last reported and offsets stay exact. Any
error goes through BACKOFF back to EPOCH, which reads the log end again from
the partition table (and the writer's answer to OP_TRUNCATE): nothing is
assumed after a failure. A slot that names another leader or epoch makes a
new Follow; the old one is dropped with whatever it had in flight.
"""

from __future__ import annotations

import dataclasses
import enum

from hostbroker.workers.replication.truncation import Truncation


class Stage(enum.Enum):
    EPOCH = "epoch"  # to ask OFFSET_FOR_LEADER_EPOCH (or cut at once)
    ASKING = "asking"  # the question is at the leader
    TRUNCATING = "truncating"  # OP_TRUNCATE at the writer
    FETCH = "fetch"  # in the next FETCH
    FETCHING = "fetching"  # in the FETCH at the leader
    APPENDING = "appending"  # OP_REPLICA_APPEND at the writer
    BACKOFF = "backoff"  # until retry_at, then EPOCH
    START = "start"  # to ask the leader's log start (OFFSETS earliest) in the next request
    ASKING_START = "asking-start"  # the OFFSETS question is at the leader
    RESTARTING = "restarting"  # OP_RESTART_LOG at the writer


# what the worker waits on for each stage: the leader (the link's request) or a writer
AT_LEADER = frozenset((Stage.ASKING, Stage.FETCHING, Stage.ASKING_START))
AT_WRITER = frozenset((Stage.TRUNCATING, Stage.APPENDING, Stage.RESTARTING))


@dataclasses.dataclass(eq=False)
class Follow:
    slot: int
    topic: str
    partition: int
    owner: int  # the writer (log dir index) that owns the slot
    leader: int
    leader_epoch: int
    stage: Stage = Stage.EPOCH
    offset: int = 0  # the log end: where the next fetch starts
    max_bytes: int = 0  # what the next fetch asks (0: replica.fetch.max.bytes)
    hw_sent: int = -1  # the leader high watermark last passed to the writer
    retry_at: float = 0.0  # monotonic seconds, in BACKOFF
    token: int = 0  # the writer op in flight (TRUNCATING, APPENDING)
    since: float = 0.0  # monotonic seconds the op at the writer was sent
    truncation: Truncation | None = None
    dropped: bool = False  # the slot no longer names this leader and epoch
    errors: int = 0  # errors in a row (for the log: the first one is said)
    leader_end: int = -1  # the leader's log end its OFFSET_OUT_OF_RANGE answer stated
    restarted: bool = False  # the log was restarted since the last append or backoff

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    def back_off(self, now: float, delay: float, counted: bool = True) -> None:
        self.stage = Stage.BACKOFF
        self.retry_at = now + delay
        self.token = 0
        self.truncation = None
        self.restarted = False
        self.errors += counted
