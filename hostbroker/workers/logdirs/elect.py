"""hb-logdirs' decisions: who leads each dir-placed partition, and its ISR.

Pure: a partition's replicas, leader, epoch and ISR (log dir ids) and the
set of live dirs in, its next state out (None: nothing changes). The rules
are the cluster controller's, called unchanged
(:mod:`hostbroker.cluster.controller_decisions`): leaders only from the ISR,
in replica order (any live replica only when ``unclean.leader.election.enable``);
the ISR never emptied by dirs leaving. So the HW never passed what a member
of the committed ISR lacked, and no acknowledged acks=-1 message is lost.

One rule is the local controller's own: when the newest state file is not
*certain* (a dir it names online is missing now, and may hold a newer copy),
a partition whose ISR names a missing (``blocked``) dir keeps no leader
until that dir returns or the operator forgets it (``logdirs forget``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hostbroker.cluster.controller_decisions import (
    after_failure,
    after_return,
    preferred,
    unclean_of,
    without,
)
from hostbroker.cluster.replica_nodes import PartitionState

TP = tuple[str, int]

__all__ = ["decide", "failover", "moved_leader", "preferred", "state_of", "unclean_of",
           "without"]


def state_of(leader: int, leader_epoch: int, isr: Iterable[int]) -> PartitionState:
    """A partition of the state file as the controller's decisions take it."""
    return PartitionState(leader, leader_epoch, tuple(isr), 0)


def decide(replicas: Sequence[int], leader: int, leader_epoch: int, isr: Sequence[int],
           live: set[int], blocked: set[int] = frozenset(),
           unclean: bool = False) -> PartitionState | None:
    """The next state of one partition with only ``live`` dirs left (None: no change).

    ``blocked``: dirs missing while the state file is not certain; a partition
    whose ISR names one has no leader (its epoch moves once, when a leader is
    taken away). Otherwise a dir gone from the leadership or the ISR is handled
    by ``after_failure``, and a partition without a leader gets one back by
    ``after_return`` once an ISR member (or, unclean, any replica) is live."""
    replicas = list(replicas)
    state = state_of(leader, leader_epoch, isr)
    if blocked and any(r in blocked for r in isr):
        if leader == -1:
            return None
        return state_of(-1, leader_epoch + 1, isr)
    gone = (leader != -1 and leader not in live) or any(r not in live for r in isr)
    if gone or (leader != -1 and leader not in replicas):  # (a leader a move took away)
        return after_failure(replicas, state, live, unclean)
    if leader == -1:
        return after_return(replicas, state, live, unclean)
    return None


def failover(partitions: Iterable[tuple[TP, object, dict, set[int]]],
             blocked: set[int] = frozenset(),
             unclean_default: bool = False) -> dict[TP, PartitionState]:
    """One pass over ``partitions`` ((topic, partition), its entry of the state file
    with ``replicas``, ``leader``, ``leader_epoch``, ``isr``, the topic's config,
    and the live dirs where its replica is online): the partitions whose state
    changes, and their new state (hb-logdirs' pass)."""
    changes: dict[TP, PartitionState] = {}
    for tp, part, config, live in partitions:
        unclean = unclean_of(config or {}, unclean_default)
        new = decide(part.replicas, part.leader, part.leader_epoch, part.isr, live, blocked,
                     unclean)
        if new is not None and (new.leader, new.leader_epoch, tuple(new.isr)) != (
                part.leader, part.leader_epoch, tuple(part.isr)):
            changes[tp] = new
    return changes


def moved_leader(replicas: Sequence[int], target: Sequence[int], leader: int, leader_epoch: int,
                 isr: Sequence[int], live: set[int]) -> PartitionState | None:
    """Step 3 of a reassignment: once every dir of ``target`` is in the ISR, the
    leadership goes to the first target dir in the ISR if the leader is not
    among ``target`` (epoch + 1); None while a target dir is not in sync, or when
    the leader stays."""
    if any(d not in isr for d in target):
        return None
    if leader in target:
        return None
    for d in target:
        if d in isr and d in live:
            return state_of(d, leader_epoch + 1, isr)
    return None
