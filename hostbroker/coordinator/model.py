"""The data of the group coordinator: a group, its members, its phase, and the
broker's limits on them (docs/spec/groups.md). Plain data, no behaviour:
:mod:`hostbroker.coordinator.state` changes it, :mod:`hostbroker.coordinator.records`
turns it into records and back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class GroupPhase(str, enum.Enum):
    EMPTY = "EMPTY"  # no members (a group in this phase is forgotten at once)
    PREPARING_REBALANCE = "PREPARING_REBALANCE"  # waiting for the members to (re)join
    STABLE = "STABLE"  # a generation and its assignment; members sync and heartbeat


@dataclass(frozen=True)
class Limits:
    """The broker's bounds on groups; each field names the setting that sets it."""

    max_members: int = 1000  # group.max.members
    max_groups: int = 10000  # group.max.groups
    min_session_timeout_ms: int = 500  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 300000  # group.max.session.timeout.ms
    max_rebalance_timeout_ms: int = 10000  # group.max.rebalance.timeout.ms
    max_topics_per_member: int = 1000  # group.max.topics.per.member
    max_streams: int = 10000  # group.max.streams
    rebalance_burst: int = 3  # group.rebalance.burst
    rebalance_min_interval_ms: int = 2000  # group.rebalance.min.interval.ms
    max_partitions: int = 65536  # max.partitions (a topic's count, a group's assignment)


@dataclass
class Member:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: dict[str, int]
    last_heartbeat: float
    joined: bool = False  # its join waits (for the rebalance in progress, or deferred)
    timer: float | None = None  # when its one live session check is due (None: none)


@dataclass
class Group:
    name: str
    phase: GroupPhase = GroupPhase.EMPTY
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline: float | None = None
    # the generation's assignment: member -> topic -> partitions of each stream
    assignment: dict[str, dict[str, list[list[int]]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # partitions it was computed with
    generation_members: tuple[str, ...] = ()
    # a STABLE group whose next rebalance waits for the churn limit starts it then
    deferred_at: float | None = None
    streams: int = 0  # the members' streams, added up (group.max.streams)
    tokens: float | None = None  # rebalances it may start now (None: a full burst)
    tokens_at: float = 0.0  # when ``tokens`` was counted
