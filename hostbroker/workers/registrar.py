"""The registrar process, ``hb-registrar``: the broker's one ZooKeeper session (cluster mode).

Started by the supervisor only when ``zookeeper.connect`` is set, after the
writers, handlers and processors are ready and before the listeners open
(the acceptor comes after it), and stopped first, so the registrations go
before the listeners close (closing its session removes every ephemeral node at
once). Owns the kazoo client and, through
:class:`~hostbroker.cluster.registry.Registration`, the nodes
``/brokers/ids/[id]`` and ``/brokers/topics/[topic]/[id]``. It reads the
partition table (read-only) and registers every topic the broker holds;
it polls the table's generation every ``_TICK_S``, which moves whenever a
topic is created or deleted, and syncs what changed.

Nothing else in the broker talks to ZooKeeper or waits for this process, so
an outage stops nothing but the registration. kazoo reconnects by itself;
after a reconnection (same session) every node is checked again, after a
session expiry (a new session) everything is registered again. Each loss
and each recovery is logged once.

At the first start (epoch 1) a ZooKeeper that does not answer within
``zookeeper.connection.timeout.ms``, or a ``broker.id`` held by another
live session, refuses the start: one line, and ``EXIT_REFUSED`` makes the
supervisor exit 78. A registration with the very same value is this
broker's own previous run (its listeners are ours now): we wait up to twice
the session timeout for it to expire. A replacement registrar (epoch > 1)
never refuses; it retries until it holds the registration again.

The supervisor opens the listeners only once this process is ready, so a
broker whose id is taken never accepts a connection (see
hostbroker/workers/supervisor.py).

Our nodes are watched (kazoo ``DataWatch``, one per node): a node deleted,
rewritten or taken over by another session is put back on the session that
registered it, with one line (at most one per node every ``_SAY_EVERY_S``;
what is held back is counted in the next). The watches are set up by a
short-lived thread (``hb-registrar-watch``: kazoo's first read of a watch
retries while the connection is down, which must not stop the loop's
heartbeat); the watch callbacks only compare and ring the doorbell; the loop
repairs. A node someone keeps rewriting is
repaired at growing intervals (``_REPAIR_MIN_S`` doubling to
``_REPAIR_MAX_S`` while it keeps happening), so it never makes us spin.

Replication (hostbroker/workers/registrar_controller.py and registrar_isr.py):
the same loop runs the controller role when this broker holds
``/controller``, writes the ISR changes this broker's leaders want (ISR
commits), and on SIGTERM, before the session closes, asks the controller to
move this broker's leaderships away (``controlled.shutdown.enable``); it
publishes which controller and epoch ZooKeeper names, the only ones this
broker's handlers take requests from (registrar_fence.py), and which topics
are replicated, so a handler never auto-creates a plain one of such a name
(registrar_names.py); and the cluster's ACLs and quotas, published to every
process of the broker (registrar_acls.py).
Partitions of replicated topics (slot ``role`` other than ROLE_PLAIN) are
never registered as 0.7 child nodes.
"""

from __future__ import annotations

import logging
import selectors
import sys
import threading
import time

from hostbroker.cluster.registry import BrokerIdTaken, Registration, advertised_info
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.peers import PeersTable
from hostbroker.shm.published import PublishedDocument
from hostbroker.shm.table import TornSlotError
from hostbroker.shm.topicnames import ReplicatedNames
from hostbroker.workers.base import EXIT_BOOT_FAILED, EXIT_OK, EXIT_REFUSED, Worker
from hostbroker.workers.registrar_acls import ClusterAccess
from hostbroker.workers.registrar_controller import ControllerRole
from hostbroker.workers.registrar_fence import ControllerFence
from hostbroker.workers.registrar_isr import IsrCommits
from hostbroker.workers.registrar_names import ReplicatedTopics

_TICK_S = 0.1  # partition-table generation poll
_RETRY_S = 0.5  # a failed sync or connection attempt is tried again after this
_HELD_STATES = (ptable.ONLINE, ptable.OFFLINE, ptable.CREATING)
_REPAIR_MIN_S = 0.25  # a node repaired again within _CALM_S waits this long, doubling...
_REPAIR_MAX_S = 8.0  # ...up to this
_CALM_S = 30.0  # a node left alone this long starts over at no wait
_SAY_EVERY_S = 60.0  # at most one repair line per node this often


class Refused(Exception):
    """The first start cannot register; the message is the one line."""


def say(line: str) -> None:
    print(f"hostbroker: {line}", file=sys.stderr, flush=True)


def held_topics(table: PartitionTable) -> dict[str, int]:
    """topic -> partition count of every topic in the partition table
    (broker-internal ``__`` topics left out)."""
    topics: dict[str, int] = {}
    plain = getattr(ptable, "ROLE_PLAIN", 0)
    for _, s in table.scan():
        if (s.state in _HELD_STATES and not s.name.startswith("__")
                and getattr(s, "role", plain) == plain):
            topics[s.name] = max(topics.get(s.name, 0), s.partition + 1)
    return topics


def holds_replicas(table: PartitionTable) -> bool:
    """Whether the broker holds a partition of a replicated topic (a controlled
    shutdown has something to move)."""
    plain = getattr(ptable, "ROLE_PLAIN", 0)
    try:
        return any(getattr(s, "role", plain) != plain for _, s in table.scan())
    except TornSlotError:
        return True


class RegistrarWorker(Worker):
    kind = "registrar"
    process_name = "hb-registrar"

    @property
    def name(self) -> str:
        return self.process_name

    def init_process(self) -> None:
        super().init_process()
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are ours to tell
        config = self.config
        self.connect = config["zookeeper.connect"]
        self.session_ms = config["zookeeper.session.timeout.ms"]
        self.connection_ms = config["zookeeper.connection.timeout.ms"]
        info = advertised_info(config["broker.id"], config["advertised.listeners"],
                               self.plan.listeners)
        self.table = PartitionTable.attach(self.plan.table_name, readonly=True)
        self.generation = -1
        self.wanted: dict[str, int] = {}
        self.client = None
        self.registration: Registration | None = None
        self.info = info
        self.dirty = True  # a sync is due
        self.verify = False  # the next sync checks every node (after a reconnection)
        self.lost: str | None = None  # why we are not registered now (logged once)
        self.taken_said = False
        self.suspects: set[str] = set()  # our nodes a watch saw wrong (repaired by the loop)
        self.repairs: dict[str, tuple[float, float]] = {}  # path -> (last repair, next wait)
        self.repair_said: dict[str, tuple[float, int]] = {}  # path -> (last line, held back)
        self.watches: dict[str, object] = {}  # path -> token of its live DataWatch
        self._state_lock = threading.Lock()
        self.role = ControllerRole(self)
        self.isr_commits = IsrCommits(self, self.table)
        self.fence = ControllerFence(self, PeersTable.attach(self.plan.peers_name))
        self.topic_names = ReplicatedTopics(
            self, ReplicatedNames.attach(self.plan.replicated_names_name),
            recheck_s=config["zookeeper.topics.recheck.ms"] / 1000)
        self.access = ClusterAccess(self, PublishedDocument.attach(self.plan.access_name),
                                    max_bindings=config["acl.max.bindings"],
                                    max_entities=config["quota.max.principals"])
        self._refresh_topics()
        if self.epoch == 1:
            self._first_registration()
        else:
            self._try_connect()
        self.fence.poll()  # the controller ZooKeeper names, known before the listeners open
        self.topic_names.poll()  # so are the replicated topics (handlers' auto-create)
        self.access.poll()  # and the cluster's ACLs and quotas (registrar_acls.py)
        self.board.set_state(self.slot, procs.WORKER_READY)

    # -- ZooKeeper session ------------------------------------------------------
    def _make_client(self, connection_ms: int):
        from hostbroker.cluster.zk import make_client

        client = make_client(self.connect, self.session_ms, connection_ms)
        client.add_listener(self._on_state)
        return client

    def _try_connect(self) -> bool:
        from hostbroker.cluster.zk import ZooKeeperUnavailable

        try:
            self.client = self._make_client(min(self.connection_ms, 1000))
        except ZooKeeperUnavailable:
            if self.lost is None:
                self.lost = self._lost_said = "ZooKeeper unreachable"
                say(f"{self.name}: no ZooKeeper server of {self.connect} answers; local produce "
                    "and fetch go on, registering when it does")
            return False
        self.registration = Registration(self.client, self.info,
                                         op_timeout_s=self.connection_ms / 1000)
        self.dirty = True
        return True

    def _first_registration(self) -> None:
        from hostbroker.cluster.zk import ZooKeeperUnavailable

        try:
            self.client = self._make_client(self.connection_ms)
        except ZooKeeperUnavailable as e:
            raise Refused(f"{e}; not starting") from None
        self.registration = Registration(self.client, self.info,
                                         op_timeout_s=self.connection_ms / 1000)
        deadline = time.monotonic() + 2 * self.session_ms / 1000
        waiting_said = False
        while not self.stopping:  # stopped while starting: run() closes the session
            try:
                self.registration.sync(self.wanted)
                break
            except BrokerIdTaken as e:
                if not e.same or time.monotonic() > deadline:
                    raise Refused(str(e)) from None
                if not waiting_said:
                    waiting_said = True
                    say(f"{self.name}: broker.id {e.broker_id} is still registered by a "
                        "previous run of this broker; waiting for its session to expire")
            except Exception as e:  # noqa: BLE001 - a ZooKeeper error at start: retry until then
                if time.monotonic() > deadline:
                    raise Refused(f"zookeeper.connect: cannot register broker "
                                  f"{self.info.broker_id}: {e or type(e).__name__}") from None
            self.heartbeat()
            time.sleep(0.1)
        else:
            return
        self.dirty = False
        self._arm_watches()
        say(f"{self.name}: registered broker {self.info.broker_id} in ZooKeeper at "
            f"{self.connect} ({', '.join(self.info.uris())})")

    def _on_state(self, state) -> None:
        """kazoo's connection thread: note what happened, wake the loop; never block."""
        from kazoo.protocol.states import KazooState

        with self._state_lock:
            if state == KazooState.LOST:
                self.lost = "ZooKeeper session expired"
                self.role.session_lost()
            elif state == KazooState.SUSPENDED:
                if self.lost is None:
                    self.lost = "ZooKeeper connection lost"
            else:  # CONNECTED: same session, or a new one after LOST
                self.dirty = True
                self.verify = True
        self.doorbell.ring()

    # -- the loop -------------------------------------------------------------------
    def _refresh_topics(self) -> None:
        generation = self.table.generation
        if generation == self.generation:
            return
        try:
            wanted = held_topics(self.table)
        except TornSlotError:
            return  # a dead worker's slot, repaired by the supervisor: next tick
        self.generation = generation
        if wanted != self.wanted:
            self.wanted = wanted
            self.dirty = True

    def _sync(self) -> None:
        from kazoo.protocol.states import KazooState

        if self.client is None or self.client.state != KazooState.CONNECTED:
            return
        with self._state_lock:
            verify, self.verify = self.verify, False
            self.dirty = False
            lost = self.lost
        try:
            self.registration.sync(self.wanted, verify=verify)
        except BrokerIdTaken as e:
            self._failed(verify)
            if not self.taken_said:
                self.taken_said = True
                say(f"{self.name}: broker.id {e.broker_id} is still registered by this "
                    "broker's previous registrar; registering when its session expires"
                    if e.same else f"{self.name}: {e}; trying again until it is free")
            return
        except Exception:  # noqa: BLE001 - connection loss, timeouts: the next round retries
            self._failed(verify)
            return
        self.taken_said = False
        self._arm_watches()
        if lost is not None:
            with self._state_lock:
                if self.lost == lost:
                    self.lost = None
            say(f"{self.name}: registered broker {self.info.broker_id} in ZooKeeper again "
                f"(after: {lost})")

    # -- watching and repairing our nodes ----------------------------------------
    def _arm_watches(self) -> None:
        """A DataWatch on each node we hold that has none yet, set up by a thread of its
        own (:meth:`_set_watches`); the watches of nodes we hold no more stop at their
        next event."""
        from hostbroker.cluster import paths

        registration = self.registration
        wanted = [paths.broker_path(self.info.broker_id)] + [
            paths.topic_broker_path(t, self.info.broker_id) for t in sorted(registration.topics)]
        new = []
        with self._state_lock:
            for path in set(self.watches) - set(wanted):
                del self.watches[path]
            for path in wanted:
                if path not in self.watches:
                    token = self.watches[path] = object()
                    new.append((path, token))
        if new:
            threading.Thread(target=self._set_watches, args=(self.client, new),
                             name="hb-registrar-watch", daemon=True).start()

    def _set_watches(self, client, new: list[tuple[str, object]]) -> None:
        """Not on the loop: a DataWatch reads its node before it returns, and kazoo
        retries that read for as long as the connection is down, which would stop the
        loop's heartbeat. What was done meanwhile is read by that first read."""
        for path, token in new:
            if self.stopping or self.watches.get(path) is not token:
                continue
            try:
                client.DataWatch(path, self._watcher(path, token))
            except Exception:  # noqa: BLE001 - not set: armed again at the next sync
                with self._state_lock:
                    if self.watches.get(path) is token:
                        del self.watches[path]
                self._failed(False)
                self.doorbell.ring()

    def _watcher(self, path: str, token: object):
        def on_data(data, stat) -> bool | None:
            """kazoo's thread: compare and ring; never block."""
            if self.stopping or self.watches.get(path) is not token:
                return False  # not ours any more: stop watching
            if self.registration.wrong(path, data, stat) is not None:
                with self._state_lock:
                    self.suspects.add(path)
                self.doorbell.ring()
            return None
        return on_data

    def _repair(self) -> None:
        from kazoo.protocol.states import KazooState

        if self.client is None or self.client.state != KazooState.CONNECTED:
            return
        now = time.monotonic()
        with self._state_lock:
            due = sorted(p for p in self.suspects if self._repair_due(p, now))
            self.suspects.difference_update(due)
        for path in due:
            try:
                what = self.registration.repair(path)
            except Exception:  # noqa: BLE001 - connection loss, a race: the next round
                with self._state_lock:
                    self.suspects.add(path)
                self._retry_at = time.monotonic() + _RETRY_S
                continue
            if what is not None:
                self._repaired(path, what, now)

    def _repair_due(self, path: str, now: float) -> bool:
        last, wait = self.repairs.get(path, (-_CALM_S, 0.0))
        if now - last >= _CALM_S:
            return True
        return now - last >= wait

    def _repaired(self, path: str, what: str, now: float) -> None:
        last, wait = self.repairs.get(path, (-_CALM_S, 0.0))
        wait = 0.0 if now - last >= _CALM_S else min(max(wait * 2, _REPAIR_MIN_S), _REPAIR_MAX_S)
        self.repairs[path] = (now, wait)
        said, held = self.repair_said.get(path, (-_SAY_EVERY_S, 0))
        if now - said < _SAY_EVERY_S:
            self.repair_said[path] = (said, held + 1)
            return
        self.repair_said[path] = (now, 0)
        more = f" ({held} more times since the last line)" if held else ""
        say(f"{self.name}: {path} was {what}; put it back{more}")

    def _failed(self, verify: bool) -> None:
        with self._state_lock:
            self.dirty = True
            self.verify = self.verify or verify
        self._retry_at = time.monotonic() + _RETRY_S

    _retry_at = 0.0
    _lost_said: str | None = None

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.doorbell.fileno(), selectors.EVENT_READ)
        while not self.stopping:
            sel.select(_TICK_S)
            self.doorbell.drain()
            self.heartbeat()
            if self.stopping:
                break
            self._refresh_topics()
            lost = self.lost
            if lost is not None and self._lost_said is None and self.client is not None:
                self._lost_said = lost
                say(f"{self.name}: {lost}; local produce and fetch go on, registering "
                    "again when it is back")
            if time.monotonic() < self._retry_at:
                continue
            if self.client is None:
                if not self._try_connect():
                    self._retry_at = time.monotonic() + _RETRY_S
                    continue
            if self.dirty:
                self._sync()
                if self.lost is None:
                    self._lost_said = None
            if self.suspects and not self.dirty:
                self._repair()
            # (the names before the controller's work: its own broker knows a new
            # topic is replicated before the states it writes name a leader)
            self.topic_names.poll()
            self.role.step()
            self.fence.poll()
            self.access.poll()
            self.isr_commits.poll()
        sel.close()
        if self.config["controlled.shutdown.enable"] and holds_replicas(self.table):
            # within the supervisor's grace for this stop (shutdown.timeout.ms + 5 s)
            self.role.controlled_shutdown(min(self.config["controlled.shutdown.timeout.ms"],
                                              self.config["shutdown.timeout.ms"]) / 1000)
        self.role.resign()
        self._close()

    def _close(self) -> None:
        """Close the session: ZooKeeper removes every node of ours at once. Bounded:
        without a server the nodes go when the session times out."""
        client = self.client
        if client is None:
            return
        closer = threading.Thread(target=client.stop, name="zk-close", daemon=True)
        closer.start()
        closer.join(self.connection_ms / 1000)

    def main(self) -> int:
        try:
            self.init_process()
        except Refused as e:
            say(str(e))
            self._close()
            return EXIT_REFUSED
        except Exception as e:  # noqa: BLE001 - the common report of a worker that cannot boot
            say(f"{self.name} failed to start: {e}")
            return EXIT_BOOT_FAILED
        self.run()
        return EXIT_OK
