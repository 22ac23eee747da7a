"""The registrar's controller role and controlled shutdown (cluster mode).

Runs inside ``hb-registrar`` (hostbroker/workers/registrar.py), on its kazoo
session and its loop; nothing here starts a process.

- :class:`ControllerRole`: every registrar tries to take the ephemeral
  ``/controller``; the one that holds it bumps ``/controller_epoch``,
  rebuilds its view from ZooKeeper (:class:`~hostbroker.cluster.controller.Controller`)
  and watches ``/brokers/ids``, ``/brokers/topics``, every replicated topic's
  node (partitions added), ``/config/changes`` (configs changed) and
  ``/admin/*``. Kazoo
  watch callbacks only note what changed and ring the doorbell; the loop
  acts (:meth:`ControllerRole.step`), with short, bounded ZooKeeper calls, so
  the heartbeat goes on. A lost session drops the role (its ``/controller``
  is gone with it); a registrar that sees ``/controller`` deleted tries again.
- The senders, one thread per live broker delivering LEADER_AND_ISR /
  STOP_REPLICA: hostbroker/workers/registrar_senders.py.

The ISR commits every broker's registrar makes are in
hostbroker/workers/registrar_isr.py.
"""

from __future__ import annotations

import logging
import threading
import time

from hostbroker.cluster import controller as ctl
from hostbroker.cluster import paths
from hostbroker.cluster.topic_changes import CONFIG_CHANGES
from hostbroker.cluster import replica_nodes
from hostbroker.workers.registrar_senders import (  # noqa: F401 - request_of: its tests
    STALE_EVERY_S,
    BrokerSender,
    request_of,
    say,
)
from hostbroker.workers.tls import inter_broker_context, inter_broker_ssl

log = logging.getLogger("hostbroker.controller")

_POLL_S = 2.0  # admin nodes are looked at this often even without a watch event


class ControllerRole:
    """The controller part of one registrar (see the module docstring). ``worker`` is
    the RegistrarWorker: its client, doorbell, config and ``_state_lock``."""

    def __init__(self, worker):
        self.worker = worker
        config = worker.config
        self.broker_id = config["broker.id"]
        self.timeout_s = config["controller.socket.timeout.ms"] / 1000
        self.handshake_s = config["ssl.handshake.timeout.ms"] / 1000
        # security.inter.broker.protocol SSL: the senders' client context (the
        # files were checked by the supervisor before any fork)
        self.tls = inter_broker_context(config) if inter_broker_ssl(config) else None
        self.unclean = config["unclean.leader.election.enable"]
        self.deletes_per_pass = config["controller.deletions.per.pass"]
        self.controller: ctl.Controller | None = None
        self.client = None
        self.events: set[str] = {"elect"}
        self.lock = threading.Lock()
        self.senders: dict[int, BrokerSender] = {}
        self.resend: set[int] = set()
        self.deleted: list[ctl.Notice] = []  # STOP_REPLICA deletes answered
        self.grown: set[str] = set()  # topics whose node changed (partitions added?)
        self.token: object | None = None  # the current watches' token
        self.next_poll = 0.0
        self.said_holder: int | None = None
        self.said_error: str | None = None
        self.stale_after = 0.0
        self._controller_watched = None  # the client whose /controller is watched

    # -- from kazoo's threads and the senders: note and ring -------------------------
    def note(self, *events: str) -> None:
        with self.lock:
            self.events.update(events)
        self.worker.doorbell.ring()

    def _topic_changed(self, controller: ctl.Controller):
        def on_topic(topic: str) -> None:
            if self.controller is not controller or self.worker.stopping:
                return  # a watch of a controller that resigned
            with self.lock:
                self.grown.add(topic)
            self.worker.doorbell.ring()
        return on_topic

    def _deleted(self, notice: ctl.Notice) -> None:
        with self.lock:
            self.deleted.append(notice)
        self.worker.doorbell.ring()

    def _overflow(self, broker_id: int) -> None:
        with self.lock:
            self.resend.add(broker_id)
        self.worker.doorbell.ring()

    @property
    def active(self) -> bool:
        return self.controller is not None

    def session_lost(self) -> None:
        """kazoo's thread: the session is gone, and ``/controller`` with it."""
        self.note("lost")

    # -- the loop ----------------------------------------------------------------------
    def step(self) -> None:
        """One round on the registrar's loop (only while connected)."""
        client = self.worker.client
        if client is None:
            return
        from kazoo.protocol.states import KazooState

        if client.state != KazooState.CONNECTED:
            return
        with self.lock:
            events, self.events = self.events, set()
            resend, self.resend = self.resend, set()
            deleted, self.deleted = self.deleted, []
            grown, self.grown = self.grown, set()
        try:
            self._step(client, events, resend, deleted, grown)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next round retries
            what = f"{type(exc).__name__}: {exc}"
            if what != self.said_error:  # once per kind of trouble, not once per round
                self.said_error = what
                say(f"hb-registrar: controller: {what}; trying again")
            with self.lock:
                self.events.update(events)
                self.resend.update(resend)
                self.deleted[:0] = deleted
                self.grown.update(grown)
            self.worker._retry_at = time.monotonic() + 0.5

    def _step(self, client, events: set[str], resend: set[int],
              deleted: list[ctl.Notice] = (), grown: set[str] = frozenset()) -> None:
        if "lost" in events or client is not self.client:
            self.resign()
            self.client = client
            events.add("elect")
        if self.controller is None:
            now = time.monotonic()
            if now >= self.next_poll:  # in case a watch on /controller was lost
                self.next_poll = now + _POLL_S
                events.add("elect")
            if "elect" in events or "stale" in events:
                self._try_take_over(client)
            return
        now = time.monotonic()
        if "unconfirmed" in events and "stale" not in events \
                and not self.controller.still_controller():
            say(f"hb-registrar: broker {self.broker_id} is no longer the controller")
            self.resign()
            self._try_take_over(client)
            return
        if "stale" in events:
            if not self.controller.still_controller():
                say(f"hb-registrar: broker {self.broker_id} is no longer the controller")
                self.resign()
                self._try_take_over(client)
                return
            if now >= self.stale_after:  # a broker saw a newer epoch, yet /controller is ours
                self.stale_after = now + STALE_EVERY_S
                refused = self.controller.epoch
                # past the highest epoch the brokers said they saw
                self.controller.bump_epoch(max((s.seen_epoch for s in self.senders.values()),
                                               default=0))
                say(f"hb-registrar: a broker refused controller epoch "
                     f"{refused}; broker {self.broker_id} goes on as the "
                     f"controller in epoch {self.controller.epoch}")
                self.controller.rebuild()
                self._sync_senders()
        if now >= self.next_poll:
            self.next_poll = now + _POLL_S
            events |= {"delete", "preferred", "shutdown", "reassign", "configs"}
        c = self.controller
        if "rewatch" in events:
            self._watch(client)
            events |= {"brokers", "topics"}  # what changed while no watch was set
        if "brokers" in events:
            c.brokers_changed()
            self._sync_senders()
        if "topics" in events:
            c.topics_changed()
        if "configs" in events:  # before partitions added: they start with the new config
            c.config_changes()
        if grown:
            c.partitions_added(grown)
        if "delete" in events:
            c.delete_topics()
        if "preferred" in events:
            c.preferred_election()
        if "shutdown" in events:
            c.controlled_shutdown()
        if "reassign" in events:
            c.reassign()
        for broker_id in sorted(resend):
            c.resend(broker_id)
        for notice in deleted:
            c.replicas_deleted(notice)

    def _try_take_over(self, client) -> None:
        c = ctl.Controller(client, self.broker_id, self._tell,
                           op_timeout_s=self.worker.connection_ms / 1000, unclean=self.unclean,
                           beat=self.worker.heartbeat, deletes_per_pass=self.deletes_per_pass)
        c.on_topic_changed = self._topic_changed(c)
        self._watch_controller(client)
        if not c.try_elect():
            holder = c.holder()
            if holder != self.said_holder:
                self.said_holder = holder
            return
        self.controller = c
        self.said_holder = self.broker_id
        try:
            for path in (paths.BROKER_IDS, paths.BROKER_TOPICS, replica_nodes.DELETE_TOPICS,
                         replica_nodes.CONTROLLED_SHUTDOWN, CONFIG_CHANGES):
                client.ensure_path(path)
            c.rebuild()
        except Exception:
            # half a view is no view: the next round takes over again (/controller is
            # still ours, so it is a new epoch and a whole rebuild)
            self.resign()
            raise
        self._sync_senders()
        self._watch(client)
        say(f"hb-registrar: broker {self.broker_id} is the controller "
             f"(controller epoch {c.epoch})")

    def _tell(self, notice: ctl.Notice) -> None:
        info = self.controller.live.get(notice.broker_id) if self.controller else None
        if info is None:
            return
        sender = self.senders.get(notice.broker_id)
        if sender is not None and sender.info != info:  # registered anew: a new address
            self.senders.pop(notice.broker_id).stop()
            sender = None
        if sender is None:
            sender = self.senders[notice.broker_id] = BrokerSender(
                info, self.broker_id, self.timeout_s, lambda: self.note("stale"),
                self._overflow, lambda: self.note("unconfirmed"), self._deleted, self.tls,
                self.handshake_s).start()
        sender.put(notice)

    def _sync_senders(self) -> None:
        """The senders of brokers no longer registered (or registered anew) stopped;
        new ones start with the first request for them (:meth:`_tell`), so only
        brokers that hold replicas get a thread."""
        live = self.controller.live if self.controller else {}
        for broker_id in list(self.senders):
            if live.get(broker_id) != self.senders[broker_id].info:
                self.senders.pop(broker_id).stop()

    def resign(self) -> None:
        self.controller = None
        self.token = None
        for sender in self.senders.values():
            sender.stop()
        self.senders = {}

    def drained(self) -> bool:
        return all(s.idle() for s in self.senders.values())

    # -- watches (set up off the loop: kazoo's first read may wait for a connection) --
    def _watch_controller(self, client) -> None:
        if self._controller_watched is client:
            return
        self._controller_watched = client

        def on_controller(data, stat) -> bool | None:
            if self._controller_watched is not client or self.worker.stopping:
                return False
            if stat is None:
                self.note("elect")
            return None

        def arm() -> None:
            if not self._quiet(client.DataWatch, replica_nodes.CONTROLLER, on_controller):
                self._controller_watched = None  # armed again at the next try
                self.note("elect")

        threading.Thread(target=arm, name="hb-registrar-watch", daemon=True).start()

    def _watch(self, client) -> None:
        token = self.token = object()

        def children(event: str):
            def on_children(_children) -> bool | None:
                if self.token is not token or self.worker.stopping:
                    return False
                self.note(event)
                return None
            return on_children

        def data(event: str):
            def on_data(_data, _stat) -> bool | None:
                if self.token is not token or self.worker.stopping:
                    return False
                self.note(event)
                return None
            return on_data

        watches = [(client.ChildrenWatch, paths.BROKER_IDS, children("brokers")),
                   (client.ChildrenWatch, paths.BROKER_TOPICS, children("topics")),
                   (client.ChildrenWatch, replica_nodes.DELETE_TOPICS, children("delete")),
                   (client.ChildrenWatch, replica_nodes.CONTROLLED_SHUTDOWN, children("shutdown")),
                   (client.ChildrenWatch, CONFIG_CHANGES, children("configs")),
                   (client.DataWatch, replica_nodes.PREFERRED_REPLICA_ELECTION, data("preferred")),
                   (client.DataWatch, replica_nodes.REASSIGN_PARTITIONS, data("reassign"))]

        def arm() -> None:
            for kind, path, callback in watches:
                if self.token is not token:
                    return
                if not self._quiet(kind, path, callback):
                    self.note("rewatch")  # all armed again by the loop, under a new token
                    return

        threading.Thread(target=arm, name="hb-registrar-watch", daemon=True).start()

    def _quiet(self, kind, path, callback) -> bool:
        """Set one watch; False when it could not be (the connection went)."""
        try:
            kind(path, callback)
        except Exception:  # noqa: BLE001 - not set: the caller arms it again
            return False
        return True

    # -- controlled shutdown -------------------------------------------------------------
    def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move this broker's leaderships away and wait (up to
        ``timeout_s``, beating) until it says done by deleting our node. When this
        broker is the controller it does the work itself first. Returns whether it
        was done."""
        from kazoo.exceptions import NodeExistsError
        from kazoo.protocol.states import KazooState

        worker = self.worker
        client = worker.client
        if client is None or client.state != KazooState.CONNECTED:
            return False
        deadline = time.monotonic() + timeout_s
        path = f"{replica_nodes.CONTROLLED_SHUTDOWN}/{self.broker_id}"
        if self.controller is not None:
            try:
                self.controller.shut_down(self.broker_id)
            except Exception as exc:  # noqa: BLE001 - a ZooKeeper error: leave the rest
                log.debug("controller: own shutdown: %s", exc)
            while not self.drained() and time.monotonic() < deadline:
                worker.heartbeat()
                time.sleep(0.05)
            self.resign()
            return True
        try:
            client.create(path, b"", ephemeral=True, makepath=True)
        except NodeExistsError:
            pass
        except Exception as exc:  # noqa: BLE001 - no ZooKeeper: stop without it
            say(f"hb-registrar: controlled shutdown not asked for ({exc or type(exc).__name__})")
            return False
        while time.monotonic() < deadline:
            worker.heartbeat()
            try:
                if client.exists(path) is None:
                    say(f"hb-registrar: controlled shutdown: the controller moved broker "
                         f"{self.broker_id}'s leaderships")
                    return True
            except Exception:  # noqa: BLE001
                return False
            time.sleep(0.05)
        say(f"hb-registrar: controlled shutdown: no answer from the controller within "
             f"{timeout_s:g} s; stopping anyway")
        return False
