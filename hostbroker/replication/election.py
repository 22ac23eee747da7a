"""The controller's decisions about one partition: who leads, who is in sync.

Pure: lists of broker ids in, a leader and an ISR out. The controller
(``cluster/controller.py``) reads ZooKeeper, calls these, and writes the
result to the partition's state node with a version check.

Rules (Kafka 0.8's, with its known losses closed):

- A leader is chosen from the ISR only, in replica order (the preferred
  replica first), among live brokers. Only when
  ``unclean.leader.election.enable`` is true may a live replica outside the
  ISR lead, and the ISR is then that replica alone: what the ISR had and it
  lacks is lost, which is why it is off by default.
- The ISR is never emptied by brokers dying: when the last in-sync broker
  dies, the ISR keeps the brokers that had everything and the partition has
  no leader (-1) until one of them returns; a broker outside it returning
  cannot lead (no unclean election), so nothing acknowledged is lost.
- Every change of leader, to -1 included, is a new leader epoch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hostbroker.replication.zknodes import NO_LEADER, PartitionState

__all__ = ["elect_leader", "next_state", "preferred_leader", "shrink_isr", "without_broker"]


def elect_leader(replicas: Sequence[int], isr: Collection[int], live: Collection[int],
                 unclean: bool = False) -> int | None:
    """The first replica (in replica order) that is live and in the ISR; with
    ``unclean``, failing that, the first live replica. None when there is none."""
    for replica in replicas:
        if replica in live and replica in isr:
            return replica
    if unclean:
        for replica in replicas:
            if replica in live:
                return replica
    return None


def preferred_leader(replicas: Sequence[int], isr: Collection[int],
                     live: Collection[int]) -> int | None:
    """The preferred replica (the first) when it may lead now (live and in the
    ISR), else None: a preferred replica election leaves such a partition be."""
    if replicas and replicas[0] in live and replicas[0] in isr:
        return replicas[0]
    return None


def shrink_isr(isr: Sequence[int], live: Collection[int]) -> tuple[int, ...]:
    """The ISR without the brokers that are not live, in its order; the ISR as it
    is when none of it is live (see the module docstring)."""
    kept = tuple(b for b in isr if b in live)
    return kept if kept else tuple(isr)


def without_broker(isr: Sequence[int], broker: int) -> tuple[int, ...]:
    """The ISR without ``broker`` (a controlled shutdown moving a follower out), or
    as it is when ``broker`` is its only member."""
    kept = tuple(b for b in isr if b != broker)
    return kept if kept else tuple(isr)


def next_state(replicas: Sequence[int], state: PartitionState | None, live: Collection[int],
               controller_epoch: int, unclean: bool = False,
               leader: int | None = None) -> PartitionState:
    """The partition's state after brokers came or went (``live`` now).

    ``state`` None: a new partition (every live replica in the ISR, the first
    of them leads, epoch 0). Else the leader stays when it is live and in the
    ISR (the ISR shrunk to live brokers); otherwise a new one is elected and
    the epoch bumped. ``leader`` asks for that broker to lead (preferred
    replica election, controlled shutdown): granted only when it is live and
    in the ISR. The result equals ``state`` but for ``controller_epoch`` when
    nothing changes; callers compare ``leader``/``isr`` to skip the write.
    """
    if state is None:
        isr = tuple(r for r in replicas if r in live)
        chosen = elect_leader(replicas, isr, live)
        return PartitionState(NO_LEADER if chosen is None else chosen, 0,
                              isr if isr else tuple(replicas), controller_epoch)
    replica_set = set(replicas)
    isr = shrink_isr([b for b in state.isr if b in replica_set] or state.isr, live)
    current = state.leader
    if leader is not None and leader in live and leader in isr:
        chosen: int | None = leader
    elif current != NO_LEADER and current in live and current in isr \
            and current in replica_set:
        chosen = current
    else:
        chosen = elect_leader(replicas, isr, live, unclean=False)
        if chosen is None and unclean:
            chosen = elect_leader(replicas, (), live, unclean=True)
            if chosen is not None:
                isr = (chosen,)
    new_leader = NO_LEADER if chosen is None else chosen
    epoch = state.leader_epoch if new_leader == current else state.leader_epoch + 1
    return PartitionState(new_leader, epoch, isr, controller_epoch)
