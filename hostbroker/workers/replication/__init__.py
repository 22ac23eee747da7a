"""The follower fetcher process, ``hb-replica`` (one per broker, cluster mode only).

Owns: this broker's part as a follower of replicated partitions. For every
partition slot whose ``role`` is FOLLOWER it keeps the log a byte-identical
copy of its leader's: one connection per leader broker (``fetcher.py``), the
cut of the log where it parts from the leader's, decided by leader epochs
before the first fetch of each new epoch (``truncation.py``), then FETCH v1
as replica ``broker.id``, long-polling, and the appends of what came back
(``worker.py``, the per-partition state in ``follows.py``); a log that ends
below the leader's log start is restarted there (OFFSETS earliest, then the
writer's ``OP_RESTART_LOG``).

Reads: the partition table (read only: roles, leaders, leader epochs, log
ends and high watermarks), the peers table (read only: the leaders'
endpoints, written by the handlers from LEADER_AND_ISR), each follower
partition's ``leader-epoch-checkpoint`` (read only), the ``rres`` rings from
every writer (results). Writes: the ``rapp`` rings to every writer
(``OP_REPLICA_APPEND``, ``OP_TRUNCATE``, ``OP_RESTART_LOG``), never a file, never shared memory
a writer owns: the owning writer appends and cuts, and checks every entry.

Why a process of its own: what a follower costs (sockets to every leader,
long polls, megabytes a second of catch-up) must not delay a produce or a
fetch of this broker's own clients, and a leader that misbehaves must not
reach the handlers. One process serves every leader with non-blocking
sockets in one selector. It dies alone: the supervisor replaces it (after
resetting its ``rres`` rings), and the replacement starts every partition
over from the table.
"""

from hostbroker.workers.replication.worker import ReplicaWorker

__all__ = ["ReplicaWorker"]
