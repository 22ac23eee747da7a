"""Who may lead a partition: the first live ISR member in replica order.

Pure: lists of broker ids in, a leader out. The controller's decisions
(``cluster/controller_decisions.py``: after a failure, a return, a
preferred election, a controlled shutdown, a reassignment) all choose their
leader through :func:`elect_leader`, and write the result to the
partition's state node with a version check.

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

__all__ = ["elect_leader"]


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
