"""What ZooKeeper says of the controller, published for this broker's handlers
(cluster mode; part of ``hb-registrar``).

A handler takes a LEADER_AND_ISR or STOP_REPLICA only from the controller
ZooKeeper names, in the epoch ZooKeeper holds
(hostbroker/workers/handler_replication.py): otherwise any client could send
one with a huge epoch and every later request of the real controller would
be refused STALE_CONTROLLER_EPOCH. :class:`ControllerFence` reads
``/controller`` and ``/controller_epoch`` (through ``cluster/replica_nodes.py``,
bounded, hostile) and writes the pair into the peers table's header
(``PeersTable.set_zk_controller``, ``shm/peers.py``):

- on every change of either node (a kazoo ``DataWatch`` on each; the
  callbacks only note and ring the doorbell, the registrar's loop reads);
- every ``POLL_S``, in case a watch was lost (the round is
  ``registrar_watch.py``'s, shared with ``registrar_names.py``);
- when a handler has refused a request CONTROLLER_NOT_CONFIRMED since the
  last read (the header's ``unconfirmed`` count moved), at most every
  ``_CONFIRM_EVERY_S``: a new controller is confirmed within a tick or two
  of its first request.

A consistent pair only: ``/controller`` is read before and after
``/controller_epoch`` and must be the same node (same ``czxid``), and an
epoch last written before that node was created is the previous
controller's (the new one has not bumped it yet): then no controller is
published (every controller request is refused until the next read), never
a mix of two controllers. A missing or malformed node publishes none too,
with one reported line. Nothing here writes to ZooKeeper.
"""

from __future__ import annotations

import time

from hostbroker.cluster import zkread
from hostbroker.cluster import replica_nodes
from hostbroker.shm.peers import PeersTable
from hostbroker.workers.registrar_watch import WatchedReader

_CONFIRM_EVERY_S = 0.1  # at most one read this often on handlers' refusals
_READ_MAX_S = 2.0  # one read waits at most this long (the loop's heartbeat waits with it)


class ControllerFence(WatchedReader):
    """Publishes ``/controller`` and ``/controller_epoch`` into ``peers`` (see the
    module docstring). ``worker`` is the RegistrarWorker: its client, doorbell,
    ``connection_ms`` and ``stopping``."""

    WHAT = "the controller"

    def __init__(self, worker, peers: PeersTable, bounds: zkread.Bounds = zkread.DEFAULT,
                 clock=time.monotonic):
        super().__init__(worker, bounds, min(worker.connection_ms / 1000, _READ_MAX_S), clock)
        self.peers = peers
        self.next_confirm = 0.0
        self.seen_unconfirmed = peers.unconfirmed
        self.published: tuple[int, int] | None = None
        peers.set_zk_controller(None, None)

    def watch(self, client, on_change) -> None:
        for path in (replica_nodes.CONTROLLER, replica_nodes.CONTROLLER_EPOCH):
            client.DataWatch(path, on_change)

    def wanted(self, now: float) -> bool:
        """Also when a handler refused a request CONTROLLER_NOT_CONFIRMED since the
        last read, at most every ``_CONFIRM_EVERY_S``."""
        unconfirmed = self.peers.unconfirmed
        if unconfirmed != self.seen_unconfirmed and now >= self.next_confirm:
            self.seen_unconfirmed = unconfirmed
            self.next_confirm = now + _CONFIRM_EVERY_S
            self.due = True
        return super().wanted(now)

    def read(self, client, now: float) -> None:
        if not self.read_and_publish(client):
            self.due = True  # the nodes moved while read: again at the next tick

    def _get(self, client, path: str):
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = client.get_async(path).get(timeout=self.timeout_s)
        except NoNodeError:
            return None
        try:
            zkread.check_size(data, path, self.bounds)
        except ValueError as exc:
            self.report(path, f"{exc}; no controller confirmed")
            return None
        return data, stat

    def read_and_publish(self, client) -> bool:
        """Read the pair and publish it (or none); False when ``/controller``
        changed while it was read (nothing published then)."""
        controller = self._get(client, replica_nodes.CONTROLLER)
        epoch_node = self._get(client, replica_nodes.CONTROLLER_EPOCH)
        again = self._get(client, replica_nodes.CONTROLLER)
        if (controller is None) != (again is None) or (
                controller is not None and controller[1].czxid != again[1].czxid):
            return False
        self.publish(self.confirmed(controller, epoch_node))
        return True

    def confirmed(self, controller, epoch_node) -> tuple[int, int] | None:
        """``(epoch, broker_id)`` that ZooKeeper's two nodes name together, or None."""
        if controller is None or epoch_node is None:
            return None
        try:
            broker_id = replica_nodes.decode_controller(controller[0], replica_nodes.CONTROLLER,
                                                        self.bounds)
            epoch = replica_nodes.decode_controller_epoch(
                epoch_node[0], replica_nodes.CONTROLLER_EPOCH, self.bounds)
        except ValueError as exc:
            self.report(replica_nodes.CONTROLLER, f"{exc}; no controller confirmed")
            return None
        if epoch_node[1].mzxid < controller[1].czxid:
            return None  # the new controller has not taken its epoch yet
        return epoch, broker_id

    def publish(self, pair: tuple[int, int] | None) -> None:
        if pair == self.published:
            return
        self.published = pair
        if pair is None:
            self.peers.set_zk_controller(None, None)
        else:
            self.peers.set_zk_controller(*pair)
