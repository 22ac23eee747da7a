"""The controller's decisions, pure, and what it tells brokers.

Lists of broker ids and a partition's state in, the partition's next state
out (None: nothing changes); no ZooKeeper, no sockets. The controller
(hostbroker/cluster/controller.py) reads ZooKeeper, calls these, writes the
result with a version check and hands :class:`Notice` values to its
senders. The single-partition rules follow
:mod:`hostbroker.replication.election` (leaders only from the ISR, in
replica order; the ISR never emptied by brokers dying).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hostbroker.cluster import paths
from hostbroker.replication.election import elect_leader
from hostbroker.cluster.replica_nodes import PartitionState

TP = tuple[str, int]

LEADER_AND_ISR = "leader_and_isr"
STOP_REPLICA = "stop_replica"
# a topic config the controller alone reads ("true" or "false"; brokers are not sent it):
# it overrides the broker setting of that name for the topic's elections
UNCLEAN = "unclean.leader.election.enable"


def unclean_of(config: dict[str, str], default: bool) -> bool:
    """A topic's ``unclean.leader.election.enable``: its config's "true" or "false"
    (any case), else ``default`` (the broker setting)."""
    return {"true": True, "false": False}.get(config.get(UNCLEAN, "").strip().lower(), default)


# -- decisions (pure) ------------------------------------------------------------


def after_failure(replicas: list[int], state: PartitionState, live: set[int],
                  unclean: bool = False) -> PartitionState | None:
    """The state of a partition once only ``live`` brokers are left, or None when
    nothing changes. A leader that is gone is replaced from the ISR (a replica
    outside it only when ``unclean``); the ISR loses the brokers gone, but never
    its last member while no one leads (that one is who may lead again)."""
    isr = [b for b in state.isr if b in live]
    leader = state.leader
    if leader in live and leader in replicas:
        if isr == list(state.isr):
            return None
        return PartitionState(leader, state.leader_epoch, isr or [leader], state.controller_epoch)
    new = elect_leader(replicas, state.isr, live, unclean)
    if new is None:
        if leader == -1 and (isr == list(state.isr) or not isr):
            return None
        return PartitionState(-1, state.leader_epoch + (leader != -1),
                              isr or list(state.isr), state.controller_epoch)
    if new not in state.isr:  # unclean: the ISR starts again with the new leader
        isr = [new]
    return PartitionState(new, state.leader_epoch + 1, isr, state.controller_epoch)


def after_return(replicas: list[int], state: PartitionState, live: set[int],
                 unclean: bool = False) -> PartitionState | None:
    """A partition without a leader gets one again when an ISR member is live, or
    (only when ``unclean``) any live replica, whose ISR it then starts alone."""
    if state.leader != -1:
        return None
    new = elect_leader(replicas, state.isr, live, unclean)
    if new is None:
        return None
    isr = [b for b in state.isr if b in live] if new in state.isr else [new]
    return PartitionState(new, state.leader_epoch + 1, isr, state.controller_epoch)


def preferred(replicas: list[int], state: PartitionState, live: set[int]) -> PartitionState | None:
    """Leadership moved to the preferred replica (the first) when it is live, in the
    ISR and not already leading; else None."""
    if not replicas or state.leader == replicas[0]:
        return None
    if elect_leader(replicas[:1], state.isr, live, False) is None:
        return None
    return PartitionState(replicas[0], state.leader_epoch + 1, list(state.isr),
                          state.controller_epoch)


def without(replicas: list[int], state: PartitionState, gone: int,
            live: set[int]) -> PartitionState | None:
    """A controlled shutdown of ``gone``: leadership moved to another live ISR member
    and ``gone`` out of the ISR; None when nothing changes or ``gone`` is the only
    one in sync (then it keeps leading until it stops)."""
    others = [b for b in state.isr if b != gone and b in live]
    if gone not in state.isr and state.leader != gone:
        return None
    if not others:
        return None
    leader = state.leader
    epoch = state.leader_epoch
    if leader == gone or leader not in live:
        leader = elect_leader(replicas, others, live - {gone}, False)
        if leader is None:
            return None
        epoch += 1
    return PartitionState(leader, epoch, others, state.controller_epoch)


# -- what brokers are told --------------------------------------------------------


@dataclass
class Notice:
    """One request for one broker: its partitions' states (LEADER_AND_ISR) or the
    partitions to stop (STOP_REPLICA, ``delete`` set for a topic deleted)."""

    kind: str
    broker_id: int
    epoch: int
    partitions: dict[TP, tuple[PartitionState, int, list[int]]] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    leaders: dict[int, paths.BrokerInfo] = field(default_factory=dict)
    stop: list[TP] = field(default_factory=list)
    delete: bool = False


@dataclass
class Partition:
    """``replicas``: who holds a copy now; ``assigned``: what the assignment node says.
    They differ only while a reassignment adds replicas (old + new), which lives in
    the controller's memory and ``/admin/reassign_partitions`` (a new controller
    adds them again); the assignment node is written once the move is done."""

    replicas: list[int]
    state: PartitionState | None = None
    version: int = -1  # zk version of the state node
    assigned: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.assigned:
            self.assigned = list(self.replicas)
