"""The leader's view of its followers: how far each has fetched, whether it
is keeping up, the ISR the leader wants, and the high watermark.

Pure and single-threaded: owned by the writer process of the partition's log
dir while it leads the partition; time is passed in (``now``, milliseconds
of any monotonic clock), so tests move it by hand.

A follower's FETCH at ``offset`` tells the leader that it holds everything
below ``offset`` (its log end, LEO). It is *caught up* at a fetch whose
offset reaches the leader's LEO of that moment; under steady load that
never happens exactly, so, as Kafka does, a fetch that reaches the leader's
LEO of the follower's *previous* fetch shows it was caught up as of that
previous fetch. A follower stays in the ISR while it was caught up within
``replica.lag.time.max.ms`` and its last fetch was at most
``replica.lag.max.bytes`` behind the leader (0: no byte bound); one outside
joins when it has reached the high watermark and was caught up within the
time bound. The leader is always in its own ISR.

The high watermark is the smallest LEO in the committed ISR, the leader's
own included; a follower whose LEO is not known yet (no fetch since this
leadership began) holds it where it is. The writer keeps the high watermark
it publishes from ever going down (max of the old and this).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["UNKNOWN_OFFSET", "FollowerView", "IsrTracker"]

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerView:
    """What the leader knows of one follower since its leadership began."""

    leo: int = UNKNOWN_OFFSET  # the follower holds everything below this
    last_caught_up: int = 0  # ms: when it last held the leader's whole log
    last_fetch: int = 0  # ms of its last fetch
    last_fetch_leader_leo: int = UNKNOWN_OFFSET  # the leader's LEO at that fetch
    lag_at_fetch: int = 0  # bytes it was behind at its last fetch


class IsrTracker:
    """Followers of one partition while this broker leads it.

    ``leader``: this broker's id; ``replicas``: the assigned replicas (the
    leader among them); ``isr``: the committed ISR; ``now``: when the
    leadership began. Every follower counts as caught up at ``now``, so that a
    new leader does not push out followers it has not heard from yet.
    """

    __slots__ = ("leader", "replicas", "isr", "_followers")

    def __init__(self, leader: int, replicas: Sequence[int], isr: Iterable[int], now: int):
        self.leader = leader
        self.replicas: tuple[int, ...] = ()
        self._followers: dict[int, FollowerView] = {}
        self.set_replicas(replicas, now)
        self.isr: tuple[int, ...] = ()
        self.set_isr(isr)

    def set_replicas(self, replicas: Sequence[int], now: int) -> None:
        """The assigned replicas changed (a reassignment); new followers count as
        caught up at ``now``, dropped ones are forgotten."""
        self.replicas = tuple(replicas)
        kept = {}
        for replica in self.replicas:
            if replica == self.leader:
                continue
            kept[replica] = self._followers.get(replica) or FollowerView(
                last_caught_up=now, last_fetch=now)
        self._followers = kept

    def set_isr(self, isr: Iterable[int]) -> None:
        """The committed ISR (from ZooKeeper): only assigned replicas count, the
        leader always."""
        members = set(isr) | {self.leader}
        self.isr = tuple(r for r in self.replicas if r in members) or (self.leader,)

    def follower(self, replica: int) -> FollowerView | None:
        return self._followers.get(replica)

    def fetched(self, replica: int, offset: int, leader_leo: int, now: int) -> bool:
        """Follower ``replica`` fetched at ``offset`` while the leader's LEO was
        ``leader_leo``. False (and nothing changes) for a broker that is not a
        follower of this partition or a negative offset."""
        view = self._followers.get(replica)
        if view is None or offset < 0:
            return False
        if offset >= leader_leo:
            view.last_caught_up = now
        elif view.last_fetch_leader_leo != UNKNOWN_OFFSET and offset >= view.last_fetch_leader_leo:
            view.last_caught_up = max(view.last_caught_up, view.last_fetch)
        view.leo = offset
        view.last_fetch = now
        view.last_fetch_leader_leo = leader_leo
        view.lag_at_fetch = max(leader_leo - offset, 0)
        return True

    def _keeping_up(self, view: FollowerView, now: int, lag_ms: int, lag_bytes: int) -> bool:
        if now - view.last_caught_up > lag_ms:
            return False
        return not (lag_bytes > 0 and view.lag_at_fetch > lag_bytes)

    def wanted_isr(self, now: int, lag_ms: int, lag_bytes: int, leo: int,
                   hw: int | None = None) -> tuple[int, ...]:
        """The ISR the leader wants now, in replica order: the leader; the ISR
        members keeping up; the others keeping up that have reached the high
        watermark ``hw`` (default: that of the committed ISR with the leader's
        LEO ``leo``). Nobody joins while the high watermark is not known."""
        if hw is None:
            hw = self.high_watermark(self.isr, leo)
        wanted = []
        for replica in self.replicas:
            if replica == self.leader:
                wanted.append(replica)
                continue
            view = self._followers[replica]
            if not self._keeping_up(view, now, lag_ms, lag_bytes):
                continue
            if replica in self.isr or (hw != UNKNOWN_OFFSET and view.leo >= hw):
                wanted.append(replica)
        return tuple(wanted)

    def high_watermark(self, isr: Iterable[int], leo: int) -> int:
        """The smallest LEO in ``isr``, the leader's own (``leo``) included; -1
        when a member's LEO is not known yet (the caller keeps its old one)."""
        smallest = leo
        for replica in isr:
            if replica == self.leader:
                continue
            view = self._followers.get(replica)
            if view is None:
                continue  # not a replica of this partition: not counted
            if view.leo == UNKNOWN_OFFSET:
                return UNKNOWN_OFFSET
            smallest = min(smallest, view.leo)
        return smallest
