"""Where a follower cuts its log before it fetches from a new leader epoch.

Pure: no I/O. A follower that has just learnt of a leader (a new leader
epoch in its partition slot) may hold entries the leader never had: it was
the leader once and appended what nobody else copied, or it copied from a
leader that lost its leadership the same way. 0.8 cut such a log to its own
high watermark, which can keep entries the new leader does not have (the
replicas then differ) or drop entries acknowledged to a producer. Leader
epochs tell exactly where the two logs part:

1. The follower asks the leader for its own latest epoch ``E``: over the
   wire with OFFSET_FOR_LEADER_EPOCH (hb-replica), or, for replicas across
   log dirs, by reading the leader's ``leader-epoch-checkpoint`` itself
   (the follower's writer). The leader answers the largest epoch it has that is at most
   ``E``, and where that epoch ends in its log (the start of its next epoch,
   or its log end).
2. If the follower has that epoch too, both logs hold the same entries up to
   the smaller of the two ends: cut there (never past the follower's own log
   end).
3. If it has not, it asks again with its largest epoch below the leader's
   answer, at most :data:`MAX_ROUNDS` times.

A log without epochs (written before replication, or empty) and a leader
that knows no epoch at or below the one asked fall back to the follower's
own high watermark: everything below it was in the ISR, so in every clean
leader's log.

:class:`Truncation` is that exchange for one partition: :meth:`first` says
what to do at the start, :meth:`answer` what the leader's answer means; each
returns a :class:`Step`, either ``ask`` (an epoch to send) or ``cut`` (the
offset to cut the log to).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import NamedTuple

MAX_ROUNDS = 8  # OFFSET_FOR_LEADER_EPOCH questions for one truncation


class Step(NamedTuple):
    ask: int | None  # the epoch to ask the leader about, or None
    cut: int | None  # the offset to cut the log to, or None


class Truncation:
    """One partition's exchange with its leader before it fetches."""

    def __init__(self, entries: Iterable[tuple[int, int]], log_end: int, high_watermark: int):
        """``entries``: the follower's leader epochs ``(epoch, start_offset)``
        (``leader-epoch-checkpoint``); ``log_end`` and ``high_watermark``: its
        log's, from the partition table."""
        pairs = sorted((int(e), int(s)) for e, s in entries)
        self.epochs = [e for e, _ in pairs]
        self.starts = [s for _, s in pairs]
        self.log_end = max(0, log_end)
        self.fallback = max(0, min(high_watermark, self.log_end))
        self.rounds = 0
        self.asked: int | None = None

    def first(self) -> Step:
        if self.log_end == 0:
            return Step(None, 0)
        if not self.epochs:
            return Step(None, self.fallback)
        return self._ask(self.epochs[-1])

    def answer(self, leader_epoch: int, end_offset: int) -> Step:
        """The leader's answer to the last question asked."""
        if self.asked is None:
            raise RuntimeError("no question was asked")
        if leader_epoch < 0 or end_offset < 0 or leader_epoch > self.asked:
            # none at or below it (or an answer that is not one): our own HW
            return Step(None, self.fallback)
        own_epoch, own_end = self.end_for(leader_epoch)
        if own_epoch == leader_epoch:
            return Step(None, min(end_offset, own_end, self.log_end))
        if own_epoch < 0 or self.rounds >= MAX_ROUNDS:
            return Step(None, self.fallback)
        return self._ask(own_epoch)

    def end_for(self, epoch: int) -> tuple[int, int]:
        """``(largest own epoch <= epoch, where it ends in our log)``; (-1, -1) if none."""
        i = bisect.bisect_right(self.epochs, epoch) - 1
        if i < 0:
            return -1, -1
        end = self.starts[i + 1] if i + 1 < len(self.starts) else self.log_end
        return self.epochs[i], min(end, self.log_end)

    def _ask(self, epoch: int) -> Step:
        self.rounds += 1
        self.asked = epoch
        return Step(epoch, None)
