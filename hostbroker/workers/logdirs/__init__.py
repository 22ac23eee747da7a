"""``hb-logdirs``: the local controller of the replicas a standalone broker places
on several of its log dirs.

One process, spawned by the supervisor only on a standalone broker with two
or more log dirs (``plan.logdirs``), after the writers are READY and before
the handlers; READY after its first election pass. It is to dir-placed
replicas what the cluster controller and the registrar are to cluster
replicas, with log dir ids for broker ids and a state file in every online
log dir for ZooKeeper (docs/storage.md, "Replicas across log dirs").

Owns:
- the replication state document (:mod:`.model`): assignment, leaders,
  leader epochs, ISRs and versions of every dir-placed partition; written,
  durable on every online dir before any change applies, by
  :class:`.statefile.StateWriters` (one thread per log dir);
- the decisions (:mod:`.elect`, the cluster controller's rules unchanged):
  failover when a dir fails, is removed, or its writer is not READY past
  ``logdirs.writer.grace.ms``; leadership back when an ISR member returns;
- the ISR commits of dir-placed leaders (:mod:`.isr`, ``registrar_isr``'s
  protocol with the state file in place of ZooKeeper);
- where each dir-placed replica's slot is, and the role each is told
  (:mod:`.replicas`: only those slots are read, not the whole table);
- topic admin of dir-placed topics forwarded by handlers (OP_LOCAL_ADMIN:
  create, delete, alter, online, forget; :mod:`.admin`, the replicas it
  makes a few per round: :mod:`.creation`);
- the LogDirTable (``shm/logdirs.py``): it is its only writer after the
  supervisor filled it.

Reads: the partition table (replica slots: role, state, offsets, ISR
wanted), the table's offline bitmap (set by writers), the process board
(writer epochs and states), each dir's state file copy at start and the
copy and ``log-dir-id`` of a dir taken back with ``logdirs online``.
Writes: partition slots only when it creates replicas (admin lock held,
``workers/replica_slots.create_replica``), the ISR commit table, the
table's generation (after a pass that moved a leadership), the state files,
``log-dir-id`` of a new disk. It talks to writers over ``dctl``/``dres``
(OP_REPLICA_STATE, OP_DIR_REOPEN) and to handlers over ``dreq``/``dans``.
"""

from hostbroker.workers.logdirs.worker import LogDirsWorker

__all__ = ["LogDirsWorker"]
