"""The truncation exchange lives in :mod:`hostbroker.replication.truncation`
(pure, shared by hb-replica's followers and the writers' local followers of
replicas across log dirs); this name stays for the code that imports it here."""

from hostbroker.replication.truncation import MAX_ROUNDS, Step, Truncation

__all__ = ["MAX_ROUNDS", "Step", "Truncation"]
