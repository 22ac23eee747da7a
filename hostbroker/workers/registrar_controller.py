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
- :class:`BrokerSender`: one thread per live broker (``hb-ctrl-send-N``)
  delivering LEADER_AND_ISR / STOP_REPLICA over the broker's registered
  listener (its Unix socket when that exists on this host, else TCP; with
  ``security.inter.broker.protocol`` SSL always its ``ssl://`` listener, this
  broker's certificate shown, the handshake bounded by
  ``ssl.handshake.timeout.ms``), each call bounded by
  ``controller.socket.timeout.ms``. A LEADER_AND_ISR names the leaders'
  listeners of that protocol (their ``ssl://`` ones under SSL), which the
  followers connect to. A failed send is sent
  again after reconnecting; a full queue (``_QUEUE``) is emptied and the
  broker is sent everything again. A broker answering STALE_CONTROLLER_EPOCH
  means another controller exists: the loop re-checks ``/controller``; the
  broker's highest epoch, which that answer carries (its partition of topic
  ""), is kept (``seen_epoch``) so that a new epoch goes past it at once. A
  request answered CONTROLLER_NOT_CONFIRMED (the broker's registrar has not
  read this controller's epoch from ZooKeeper yet), BROKER_NOT_AVAILABLE or
  REQUEST_TIMED_OUT is sent again after the backoff; refused that way for
  ``_STALE_EVERY_S``, the loop checks that ``/controller`` is still ours. A
  STOP_REPLICA with delete answered without error is handed back to the loop
  with the partitions the broker deleted (a topic deletion stays pending until
  every replica has; one whose delete failed there, a disk error, is sent
  again when the broker returns).

The ISR commits every broker's registrar makes are in
hostbroker/workers/registrar_isr.py.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import socket
import ssl
import struct
import threading
import time

from hostbroker.cluster import controller as ctl
from hostbroker.cluster import paths
from hostbroker.cluster.topic_changes import CONFIG_CHANGES
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.replication import zknodes
from hostbroker.workers.tls import inter_broker_context, inter_broker_ssl

log = logging.getLogger("hostbroker.controller")

_QUEUE = 64  # requests waiting for one broker; past it they are replaced by one full resend
_BACKOFF_MIN_S = 0.1
_BACKOFF_MAX_S = 2.0
_MAX_ANSWER_BYTES = 16 << 20  # a controller request's answer is a short list of error codes
_POLL_S = 2.0  # admin nodes are looked at this often even without a watch event
_STALE_CONTROLLER_EPOCH = ErrorCode.STALE_CONTROLLER_EPOCH
_STALE_EVERY_S = 5.0  # at most one new epoch this often on STALE_CONTROLLER_EPOCH answers
# answers after which the same request is sent again (after the backoff): the
# broker has not confirmed this controller in ZooKeeper yet, or could not
# take it now; any other code ends the request
_RETRIED = frozenset({ErrorCode.CONTROLLER_NOT_CONFIRMED, ErrorCode.BROKER_NOT_AVAILABLE,
                      ErrorCode.REQUEST_TIMED_OUT})


def _say(line: str) -> None:
    import sys

    print(f"hostbroker: {line}", file=sys.stderr, flush=True)


def request_of(notice: ctl.Notice, controller_id: int):
    """The wire request body of ``notice``: a LEADER_AND_ISR (version 1) names
    every kind of listener each leader registered, whatever protocol the
    brokers speak to one another (each broker takes the kind it needs)."""
    from hostbroker.protocol import replication as rp
    from hostbroker.protocol.bodies import TopicConfigEntry

    if notice.kind == ctl.STOP_REPLICA:
        return rp.StopReplicaRequest(
            controller_id, notice.epoch, int(notice.delete),
            tuple(rp.StopReplicaPartition(t, p) for t, p in notice.stop))
    parts = tuple(
        rp.LeaderAndIsrPartition(t, p, state.leader, state.leader_epoch, tuple(state.isr),
                                 version, tuple(replicas))
        for (t, p), (state, version, replicas) in sorted(notice.partitions.items()))
    # a topic with no overrides is sent with none (its replicas drop any they had);
    # one left out of ``notice.configs`` (its config not known) is not sent at all
    configs = tuple(rp.TopicConfigs(t, tuple(TopicConfigEntry(k, v) for k, v in sorted(c.items())))
                    for t, c in sorted(notice.configs.items()) if c is not None)
    leaders = sorted(notice.leaders.values(), key=lambda b: b.broker_id)
    brokers = tuple(rp.BrokerEndpoints(b.broker_id, b.host, b.port or 0, b.unix,
                                       b.ssl_host, b.ssl_port or -1)
                    for b in leaders)
    return rp.LeaderAndIsrRequestV1(controller_id, notice.epoch, parts, configs, brokers)


class BrokerSender:
    """One broker's queue of controller requests and the thread that sends them
    (see the module docstring). ``on_stale()``, ``on_overflow(broker_id)`` and
    ``on_unconfirmed()`` are called from the thread; they must only note and ring."""

    def __init__(self, info: paths.BrokerInfo, controller_id: int, timeout_s: float,
                 on_stale, on_overflow, on_unconfirmed=None, on_deleted=None,
                 tls: ssl.SSLContext | None = None, handshake_s: float = 10.0):
        self.info = info
        self.tls = tls  # security.inter.broker.protocol SSL: the broker's client context
        self.handshake_s = handshake_s
        self.on_deleted = on_deleted or (lambda notice: None)
        self.on_unconfirmed = on_unconfirmed or (lambda: None)
        self.controller_id = controller_id
        self.timeout_s = timeout_s
        self.on_stale = on_stale
        self.on_overflow = on_overflow
        self.queue: queue.Queue = queue.Queue(_QUEUE)
        self.stopped = threading.Event()
        self.sock: socket.socket | None = None
        self.sent = 0
        self.seen_epoch = 0  # the highest controller epoch a stale answer named
        self.not_done: set = set()  # partitions the last answer named with an error
        self.correlation = 0
        self.thread = threading.Thread(target=self._run, name=f"hb-ctrl-send-{info.broker_id}",
                                       daemon=True)

    def start(self) -> BrokerSender:
        self.thread.start()
        return self

    def put(self, notice: ctl.Notice) -> None:
        try:
            self.queue.put_nowait(notice)
        except queue.Full:
            while True:
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    break
            self.on_overflow(self.info.broker_id)

    def stop(self) -> None:
        self.stopped.set()
        try:
            self.queue.put_nowait(None)
        except queue.Full:
            pass

    def idle(self) -> bool:
        return self.queue.empty() and not self._busy

    _busy = False

    def _connect(self) -> socket.socket:
        info = self.info
        if self.tls is not None:
            return self._connect_tls()
        if info.unix and os.path.exists(info.unix):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address = info.unix
        elif info.host and info.port:
            sock = socket.socket(socket.AF_INET6 if ":" in info.host else socket.AF_INET,
                                 socket.SOCK_STREAM)
            address = (info.host, info.port)
        else:
            raise OSError(f"broker {info.broker_id} has no listener reachable from here")
        sock.settimeout(self.timeout_s)
        try:
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        return sock

    def _connect_tls(self) -> socket.socket:
        """The broker's ``ssl://`` listener, this broker's certificate shown and
        its own verified, the handshake within ``ssl.handshake.timeout.ms``."""
        from hostbroker.client.tls import handshake

        info = self.info
        if not (info.ssl_host and info.ssl_port):
            raise OSError(f"broker {info.broker_id} registered no ssl:// listener")
        sock = socket.create_connection((info.ssl_host, info.ssl_port), self.timeout_s)
        try:
            wrapped = handshake(self.tls, sock, info.ssl_host, self.handshake_s)
        except (OSError, ValueError):
            sock.close()
            raise
        wrapped.settimeout(self.timeout_s)
        return wrapped

    def _recv(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise OSError("connection closed by the broker")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _send(self, notice: ctl.Notice) -> int:
        """Send one request and read its answer; returns its top-level error code."""
        from hostbroker.protocol import api
        from hostbroker.protocol import replication as rp

        if self.sock is None:
            self.sock = self._connect()
        self.correlation = (self.correlation + 1) & 0x7FFFFFFF
        frame = rp.encode_request(request_of(notice, self.controller_id),
                                  self.correlation,
                                  f"controller-{self.controller_id}")
        self.sock.sendall(frame)
        (size,) = struct.unpack(">i", self._recv(4))
        if not 4 <= size <= _MAX_ANSWER_BYTES:
            raise OSError(f"answer of {size} bytes")
        answer = self._recv(size)
        if api.is_error_frame(answer):
            return int(api.decode_error_frame(answer)[1])
        cls = (rp.StopReplicaResponse if notice.kind == ctl.STOP_REPLICA
               else rp.LeaderAndIsrResponse)
        try:
            correlation, response = rp.decode_response(answer, cls)
        except (ProtocolError, ValueError) as exc:
            raise OSError(f"not an answer: {exc}") from None
        if correlation != self.correlation:
            raise OSError("answer to another request")
        # INVALID_REQUEST: not a replica there (a plain topic of that name), nothing to do
        self.not_done = {(p.topic, p.partition) for p in response.partitions
                         if p.error_code not in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST)}
        if response.error_code == _STALE_CONTROLLER_EPOCH:
            for part in response.partitions[-1:]:
                if part.topic == "" and 0 <= part.partition <= zknodes.MAX_EPOCH:
                    self.seen_epoch = max(self.seen_epoch, part.partition)
        return int(response.error_code)

    def _close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _run(self) -> None:
        backoff = _BACKOFF_MIN_S
        while not self.stopped.is_set():
            notice = self.queue.get()
            if notice is None or self.stopped.is_set():
                break
            self._busy = True
            refused_since = 0.0
            while not self.stopped.is_set():
                try:
                    code = self._send(notice)
                except Exception as exc:  # noqa: BLE001 - a hostile or gone broker: reconnect
                    log.debug("controller: send to broker %d: %s", self.info.broker_id, exc)
                    self._close()
                    self.stopped.wait(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX_S)
                    continue
                if code in _RETRIED:
                    # not taken yet: this broker's registrar has not read our
                    # epoch from ZooKeeper, or its handler was busy; the same
                    # request again (later ones wait behind it, in order)
                    now = time.monotonic()
                    refused_since = refused_since or now
                    if now - refused_since >= _STALE_EVERY_S:
                        refused_since = now
                        self.on_unconfirmed()  # still the controller ZooKeeper names?
                    self.stopped.wait(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX_S)
                    continue
                backoff = _BACKOFF_MIN_S
                self.sent += 1
                if code == _STALE_CONTROLLER_EPOCH:
                    self.on_stale()
                elif code == 0 and notice.kind == ctl.STOP_REPLICA and notice.delete:
                    done = [tp for tp in notice.stop if tp not in self.not_done]
                    if done:
                        self.on_deleted(dataclasses.replace(notice, stop=done))
                elif code:
                    log.debug("controller: broker %d refused a request: %s",
                              self.info.broker_id, ErrorCode(code).name
                              if code in ErrorCode._value2member_map_ else code)
                break
            self._busy = False
        self._close()


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
                _say(f"hb-registrar: controller: {what}; trying again")
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
            _say(f"hb-registrar: broker {self.broker_id} is no longer the controller")
            self.resign()
            self._try_take_over(client)
            return
        if "stale" in events:
            if not self.controller.still_controller():
                _say(f"hb-registrar: broker {self.broker_id} is no longer the controller")
                self.resign()
                self._try_take_over(client)
                return
            if now >= self.stale_after:  # a broker saw a newer epoch, yet /controller is ours
                self.stale_after = now + _STALE_EVERY_S
                refused = self.controller.epoch
                # past the highest epoch the brokers said they saw
                self.controller.bump_epoch(max((s.seen_epoch for s in self.senders.values()),
                                               default=0))
                _say(f"hb-registrar: a broker refused controller epoch "
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
            for path in (paths.BROKER_IDS, paths.BROKER_TOPICS, zknodes.DELETE_TOPICS,
                         zknodes.CONTROLLED_SHUTDOWN, CONFIG_CHANGES):
                client.ensure_path(path)
            c.rebuild()
        except Exception:
            # half a view is no view: the next round takes over again (/controller is
            # still ours, so it is a new epoch and a whole rebuild)
            self.resign()
            raise
        self._sync_senders()
        self._watch(client)
        _say(f"hb-registrar: broker {self.broker_id} is the controller "
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
            if not self._quiet(client.DataWatch, zknodes.CONTROLLER, on_controller):
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
                   (client.ChildrenWatch, zknodes.DELETE_TOPICS, children("delete")),
                   (client.ChildrenWatch, zknodes.CONTROLLED_SHUTDOWN, children("shutdown")),
                   (client.ChildrenWatch, CONFIG_CHANGES, children("configs")),
                   (client.DataWatch, zknodes.PREFERRED_REPLICA_ELECTION, data("preferred")),
                   (client.DataWatch, zknodes.REASSIGN_PARTITIONS, data("reassign"))]

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
        path = f"{zknodes.CONTROLLED_SHUTDOWN}/{self.broker_id}"
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
            _say(f"hb-registrar: controlled shutdown not asked for ({exc or type(exc).__name__})")
            return False
        while time.monotonic() < deadline:
            worker.heartbeat()
            try:
                if client.exists(path) is None:
                    _say(f"hb-registrar: controlled shutdown: the controller moved broker "
                         f"{self.broker_id}'s leaderships")
                    return True
            except Exception:  # noqa: BLE001
                return False
            time.sleep(0.05)
        _say(f"hb-registrar: controlled shutdown: no answer from the controller within "
             f"{timeout_s:g} s; stopping anyway")
        return False
