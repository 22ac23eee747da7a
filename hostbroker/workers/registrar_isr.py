"""ISR commits: the ISR changes this broker's leaders want, written to ZooKeeper.

Runs on the ``hb-registrar`` loop (hostbroker/workers/registrar.py), every
broker's, in cluster mode. A leader's writer publishes the ISR it wants in
its partition slot (``isr_wanted``, a bitmap over the slot's replicas);
:class:`IsrCommits` writes it to the partition's state node, version-checked
against a fresh read whose leader and leader epoch are the slot's (else the
controller has moved on and its next LEADER_AND_ISR says so), adding a
broker to the ISR only while that broker is registered in ``/brokers/ids``;
then it stores the commit in the ``ISR_COMMITS`` table (same slot index;
``plan.isr_commits_name``) and rings the writer, which adopts it. The
commit is stored under the admin lock and only while the partition slot
still holds that partition, leader and epoch: a handler that claims the
slot for another partition clears it under the same lock
(``IsrCommitTable``), so no commit outlives its partition in the slot. A change
not written (a lost race, a broker not registered, ZooKeeper trouble) is
looked at again after ``_ISR_RETRY_S``.

The replicas a standalone broker places on its log dirs take the same steps
with the log dirs' state file in place of ZooKeeper (``hb-logdirs``,
:class:`hostbroker.workers.logdirs.isr.LocalIsrCommits`, a subclass that
overrides :meth:`IsrCommits._ready`, :meth:`IsrCommits._kept`,
:meth:`IsrCommits._slots`, :meth:`IsrCommits._write_state` and
:meth:`IsrCommits._flush`: the changes of one poll are written in one state file
write); this class skips their slots.
"""

from __future__ import annotations

import logging
import time

from hostbroker.cluster import replica_nodes
from hostbroker.shm.partitions import PLACEMENT_LOG_DIRS

log = logging.getLogger("hostbroker.controller")

_ISR_RETRY_S = 0.5


def slot_replicas(s) -> list[int]:
    """The replica broker ids of a partition slot, in assignment order."""
    return list(s.replicas)


class IsrCommits:
    """The ISR changes this broker's leaders want, written to ZooKeeper (see the
    module docstring). ``poll()`` runs on the registrar's loop."""

    def __init__(self, worker, table):
        self.worker = worker
        self.table = table
        self.commits = None
        self.failed: dict[int, float] = {}  # slot -> when a write may be tried again
        # slot -> (leader_epoch, isr bits, the slot's isr_version) written: an ISR the
        # controller set since (a new isr_version) makes the same bits worth writing again
        self.done: dict[int, tuple[int, int, int]] = {}
        self.wakers: dict[int, object] = {}  # writer index -> its doorbell
        self.lock = None  # the admin lock, attached on the first commit

    def _commit_table(self):
        if self.commits is None:
            from hostbroker.shm.partitions import IsrCommitTable

            self.commits = IsrCommitTable.attach(self.worker.plan.isr_commits_name)
        return self.commits

    def _ready(self) -> bool:
        """Whether commits can be written now: the ZooKeeper session is connected."""
        from kazoo.protocol.states import KazooState

        client = self.worker.client
        return client is not None and client.state == KazooState.CONNECTED

    def _kept(self, s) -> bool:
        """Whether slot ``s``'s commits are this class's: cluster (and plain) slots
        here; the replicas placed on log dirs are hb-logdirs' (``LocalIsrCommits``)."""
        return s.placement != PLACEMENT_LOG_DIRS

    def _slots(self):
        """``(index, record)`` of the slots to look at: every slot in use."""
        return self.table.scan()

    def poll(self) -> None:
        from hostbroker.shm import partitions as ptable
        from hostbroker.shm.table import TornSlotError

        if not self._ready():
            return
        role_leader = getattr(ptable, "ROLE_LEADER", None)
        if role_leader is None:
            return
        try:
            slots = self._slots()
        except TornSlotError:
            return
        now = time.monotonic()
        written = []
        for index, s in slots:
            if getattr(s, "role", 0) != role_leader or s.isr_wanted == s.isr:
                continue
            if not self._kept(s):
                continue
            if self.done.get(index) == (s.leader_epoch, s.isr_wanted, s.isr_version):
                continue
            if self.failed.get(index, 0.0) > now:
                continue
            try:
                version = self._write_state(index, s, self._wanted(s))
            except Exception as exc:  # noqa: BLE001 - store trouble: try again later
                log.debug("isr commit %s-%d: %s", s.name, s.partition, exc)
                version = None
            if version is None:
                self.failed[index] = now + _ISR_RETRY_S
            else:
                written.append((index, s, version))
        if written and not self._flush():
            for index, _, _ in written:
                self.failed[index] = now + _ISR_RETRY_S
            return
        for index, s, version in written:
            if not self._finish(index, s, version):
                self.failed[index] = now + _ISR_RETRY_S

    @staticmethod
    def _wanted(s) -> list[int]:
        """The ISR slot ``s``'s leader wants, as ids."""
        return [b for i, b in enumerate(slot_replicas(s)) if s.isr_wanted >> i & 1]

    def _flush(self) -> bool:
        """Make durable the changes one poll's ``_write_state`` calls made; False:
        none was (each is tried again later). Each ZooKeeper write is already."""
        return True

    def _finish(self, index: int, s, version: int) -> bool:
        """Store a written commit and ring its writer."""
        if not self._store(index, s, version):
            return False
        self.done[index] = (s.leader_epoch, s.isr_wanted, s.isr_version)
        waker = self.wakers.get(s.owner)
        if waker is None:
            waker = self.wakers[s.owner] = self.worker.waker("writer", s.owner)
        waker.ring()
        return True

    def _write_state(self, index: int, s, isr: list[int]) -> int | None:
        """Write ISR ``isr`` of slot ``index`` (read as ``s``) to the partition's
        state node; its new zk version, or None when it is not written (the
        controller moved on, a broker joining is not registered, a lost race)."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        from hostbroker.cluster.replica_nodes import PartitionState

        client = self.worker.client
        if self.worker.info.broker_id not in isr:
            return None
        path = replica_nodes.state_path(s.name, s.partition)
        timeout = self.worker.connection_ms / 1000
        try:
            data, stat = client.get_async(path).get(timeout=timeout)
        except NoNodeError:
            return None
        state = replica_nodes.decode_state(data, path)
        if state.leader != s.leader or state.leader_epoch != s.leader_epoch:
            return None  # the controller moved on; the next LEADER_AND_ISR says so
        added = set(isr) - set(state.isr)
        if added:  # a broker joins the ISR only while registered: never one that just died
            from hostbroker.cluster import paths

            names = client.get_children_async(paths.BROKER_IDS).get(timeout=timeout)
            if any(str(b) not in names for b in added):
                return None
        new = PartitionState(s.leader, s.leader_epoch, tuple(isr), state.controller_epoch)
        try:
            stat = client.set_async(path, replica_nodes.encode_state(new),
                                    version=stat.version).get(timeout=timeout)
        except BadVersionError:
            return None
        return stat.version

    def _store(self, index: int, s, version: int) -> bool:
        """Store the commit of slot ``index`` (read as ``s``) at state node
        version ``version`` under the admin lock, unless the slot no longer
        holds that partition as its leader in that epoch (deleted, or
        claimed by another partition since it was read)."""
        from hostbroker.shm import partitions as ptable
        from hostbroker.shm.adminlock import AdminLock
        from hostbroker.shm.table import TornSlotError

        plan = self.worker.plan
        if self.lock is None:
            self.lock = AdminLock.attach(plan.admin_lock_key,
                                         self.worker.config["admin.lock.timeout.ms"] / 1000)
        with self.lock:
            now = self.table.read(index)
            if (now.state != ptable.ONLINE or now.role != ptable.ROLE_LEADER
                    or (now.name, now.partition, now.leader_epoch)
                    != (s.name, s.partition, s.leader_epoch)):
                return False
            self._commit_table().commit(index, version, s.isr_wanted, s.leader_epoch)
        return True
