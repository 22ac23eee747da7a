"""Replication's decisions, pure: no sockets, no ZooKeeper client, no processes.

Kafka 0.8's replicas, ISR, high watermark and controller, with leader epochs
(docs/cluster.md, "Replicated topics"; docs/spec/zookeeper.md, "Replication"). The
processes that act on these decisions live elsewhere: the controller in the
registrar (``cluster/controller.py``), the leader's view of its followers in
the writer, the follower's fetching in hb-replica. They all decide through
this package, so every decision can be tested in memory. How the replication
state is kept in ZooKeeper is ``cluster/replica_nodes.py``'s.

- ``assignment``  which brokers hold each partition's replicas (Kafka's
                  round-robin with a random start and shifted followers), and
                  the plan of ``reassign generate``
- ``election``    who may lead a partition (the controller's decisions,
                  ``cluster/controller_decisions.py``, elect through it)
- ``isr``         the leader's view of its followers: who is caught up, the
                  ISR it wants, the high watermark (clock injected)
- ``truncation``  where a follower cuts its log before it copies from a new
                  leader epoch (the leader-epoch exchange)
- ``dirplacement`` which log dirs of one standalone broker hold a topic's
                  replicas (replicas across log dirs)
- ``localstate``  the replication state file of replicas across log dirs
                  (``log-dirs-state``): its document, codec and newest copy
"""

from hostbroker.protocol.replica_fields import MAX_REPLICAS

__all__ = ["MAX_REPLICAS"]
