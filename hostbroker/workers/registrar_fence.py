"""What ZooKeeper says of the controller, published for this broker's handlers
(cluster mode; part of ``hb-registrar``).

A handler takes a LEADER_AND_ISR or STOP_REPLICA only from the controller
ZooKeeper names, in the epoch ZooKeeper holds
(hostbroker/workers/handler_replication.py): otherwise any client could send
one with a huge epoch and every later request of the real controller would
be refused STALE_CONTROLLER_EPOCH. :class:`ControllerFence` reads
``/controller`` and ``/controller_epoch`` (through ``replication/zknodes.py``,
bounded, hostile) and writes the pair into the peers table's header
(``PeersTable.set_zk_controller``, ``shm/peers.py``):

- on every change of either node (a kazoo ``DataWatch`` on each; the
  callbacks only note and ring the doorbell, the registrar's loop reads);
- every ``_POLL_S``, in case a watch was lost;
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

import logging
import threading
import time

from hostbroker.cluster import zkread
from hostbroker.replication import zknodes
from hostbroker.shm.peers import PeersTable

log = logging.getLogger("hostbroker.registrar")

_POLL_S = 2.0  # read again this often even without a watch event
_CONFIRM_EVERY_S = 0.1  # at most one read this often on handlers' refusals
_RETRY_S = 0.5  # a failed read is tried again after this
_READ_MAX_S = 2.0  # one read waits at most this long (the loop's heartbeat waits with it)


class ControllerFence:
    """Publishes ``/controller`` and ``/controller_epoch`` into ``peers`` (see the
    module docstring). ``worker`` is the RegistrarWorker: its client, doorbell,
    ``connection_ms`` and ``stopping``."""

    def __init__(self, worker, peers: PeersTable, bounds: zkread.Bounds = zkread.DEFAULT,
                 clock=time.monotonic):
        self.worker = worker
        self.peers = peers
        self.bounds = bounds
        self.clock = clock
        self.report = zkread.Reporter(log)
        self.timeout_s = min(worker.connection_ms / 1000, _READ_MAX_S)
        self.due = True
        self.next_read = 0.0
        self.next_confirm = 0.0
        self.seen_unconfirmed = peers.unconfirmed
        self.published: tuple[int, int] | None = None
        self.said_error: str | None = None
        self._watched = None  # the client whose nodes are watched
        peers.set_zk_controller(None, None)

    # -- kazoo's threads: note and ring -----------------------------------------------
    def note(self) -> None:
        self.due = True
        self.worker.doorbell.ring()

    def _arm(self, client) -> None:
        if self._watched is client:
            return
        self._watched = client

        def on_change(_data, _stat) -> bool | None:
            if self._watched is not client or self.worker.stopping:
                return False
            self.note()
            return None

        def arm() -> None:
            for path in (zknodes.CONTROLLER, zknodes.CONTROLLER_EPOCH):
                try:
                    client.DataWatch(path, on_change)
                except Exception:  # noqa: BLE001 - not set: armed again by the loop
                    if self._watched is client:
                        self._watched = None
                    self.note()
                    return

        threading.Thread(target=arm, name="hb-registrar-watch", daemon=True).start()

    # -- the loop ------------------------------------------------------------------------
    def poll(self) -> None:
        """One round on the registrar's loop: read and publish when due."""
        client = self.worker.client
        if client is None:
            return
        from kazoo.protocol.states import KazooState

        if client.state != KazooState.CONNECTED:
            return
        self._arm(client)
        now = self.clock()
        unconfirmed = self.peers.unconfirmed
        if unconfirmed != self.seen_unconfirmed and now >= self.next_confirm:
            self.seen_unconfirmed = unconfirmed
            self.next_confirm = now + _CONFIRM_EVERY_S
            self.due = True
        if not self.due and now < self.next_read:
            return
        self.due = False
        self.next_read = now + _POLL_S
        try:
            consistent = self.read_and_publish(client)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: read again soon
            what = f"{type(exc).__name__}: {exc}"
            if what != self.said_error:
                self.said_error = what
                log.warning("hb-registrar: reading the controller from ZooKeeper: %s", what)
            self.next_read = now + _RETRY_S
            return
        self.said_error = None
        if not consistent:
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
        controller = self._get(client, zknodes.CONTROLLER)
        epoch_node = self._get(client, zknodes.CONTROLLER_EPOCH)
        again = self._get(client, zknodes.CONTROLLER)
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
            broker_id = zknodes.decode_controller(controller[0], zknodes.CONTROLLER, self.bounds)
            epoch = zknodes.decode_controller_epoch(epoch_node[0], zknodes.CONTROLLER_EPOCH,
                                                    self.bounds)
        except ValueError as exc:
            self.report(zknodes.CONTROLLER, f"{exc}; no controller confirmed")
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
