"""The controller's senders (cluster mode): how LEADER_AND_ISR and STOP_REPLICA
reach each live broker, for :mod:`hostbroker.workers.registrar_controller`.

- :func:`request_of`: the wire request of a controller notice; a
  LEADER_AND_ISR (version 1) names every kind of listener each leader
  registered (tcp://, unix://, ssl://), whatever protocol the brokers speak to
  one another: each broker stores them all (``shm/peers.py``) and takes the
  kind it needs.
- :class:`BrokerSender`: one thread per live broker (``hb-ctrl-send-N``)
  delivering LEADER_AND_ISR / STOP_REPLICA over the broker's registered
  listener (its Unix socket when that exists on this host, else TCP; with
  ``security.inter.broker.protocol`` SSL always its ``ssl://`` listener, this
  broker's certificate shown, the handshake bounded by
  ``ssl.handshake.timeout.ms``), each call bounded by
  ``controller.socket.timeout.ms``. A failed send is sent again after
  reconnecting; a full queue (``_QUEUE``) is emptied and the
  broker is sent everything again. A broker answering STALE_CONTROLLER_EPOCH
  means another controller exists: the loop re-checks ``/controller``; the
  broker's highest epoch, which that answer carries (its partition of topic
  ""), is kept (``seen_epoch``) so that a new epoch goes past it at once. A
  request answered CONTROLLER_NOT_CONFIRMED (the broker's registrar has not
  read this controller's epoch from ZooKeeper yet), BROKER_NOT_AVAILABLE or
  REQUEST_TIMED_OUT is sent again after the backoff; refused that way for
  ``STALE_EVERY_S``, the loop checks that ``/controller`` is still ours. A
  STOP_REPLICA with delete answered without error is handed back to the loop
  with the partitions the broker deleted (a topic deletion stays pending until
  every replica has; one whose delete failed there, a disk error, is sent
  again when the broker returns).
  A failure (the broker not reached, a TLS handshake or hostname check
  failed, a request refused with an error code such as
  CLUSTER_AUTHORIZATION_FAILED) is said in the log the first time and each
  time its reason changes, as hb-replica's fetchers say theirs.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import socket
import ssl
import struct
import threading
import time

from hostbroker.cluster import controller as ctl
from hostbroker.cluster import paths
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.cluster import replica_nodes

_KIND = {ctl.LEADER_AND_ISR: "LEADER_AND_ISR", ctl.STOP_REPLICA: "STOP_REPLICA"}
_QUEUE = 64  # requests waiting for one broker; past it they are replaced by one full resend
_BACKOFF_MIN_S = 0.1
_BACKOFF_MAX_S = 2.0
_MAX_ANSWER_BYTES = 16 << 20  # a controller request's answer is a short list of error codes
_STALE_CONTROLLER_EPOCH = ErrorCode.STALE_CONTROLLER_EPOCH
STALE_EVERY_S = 5.0  # at most one new epoch this often on STALE_CONTROLLER_EPOCH answers
# answers after which the same request is sent again (after the backoff): the
# broker has not confirmed this controller in ZooKeeper yet, or could not
# take it now; any other code ends the request
_RETRIED = frozenset({ErrorCode.CONTROLLER_NOT_CONFIRMED, ErrorCode.BROKER_NOT_AVAILABLE,
                      ErrorCode.REQUEST_TIMED_OUT})


def _reason(exc: Exception) -> str:
    """One line of why a send failed (a TLS verification's own message)."""
    return (getattr(exc, "verify_message", None) or getattr(exc, "strerror", None)
            or str(exc) or type(exc).__name__)


def _code_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else "error"


def say(line: str) -> None:
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
        self.said: str | None = None  # the last failure said in the log (None: it works)
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
                if part.topic == "" and 0 <= part.partition <= replica_nodes.MAX_EPOCH:
                    self.seen_epoch = max(self.seen_epoch, part.partition)
        return int(response.error_code)

    def _tell(self, reason: str | None) -> None:
        """Say a failure in the log the first time, and each time its reason
        changes (None: the broker took a request again, said once)."""
        if reason == self.said:
            return
        self.said = reason
        what = reason or "takes the controller's requests again"
        say(f"hb-registrar: controller: broker {self.info.broker_id} {what}")

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
                    self._tell(f"cannot reach it ({_reason(exc)}); trying again")
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
                    if now - refused_since >= STALE_EVERY_S:
                        refused_since = now
                        self.on_unconfirmed()  # still the controller ZooKeeper names?
                    self.stopped.wait(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX_S)
                    continue
                backoff = _BACKOFF_MIN_S
                if not code and self.said is not None:
                    self._tell(None)
                self.sent += 1
                if code == _STALE_CONTROLLER_EPOCH:
                    self.on_stale()
                elif code == 0 and notice.kind == ctl.STOP_REPLICA and notice.delete:
                    done = [tp for tp in notice.stop if tp not in self.not_done]
                    if done:
                        self.on_deleted(dataclasses.replace(notice, stop=done))
                elif code:
                    self._tell(f"refused the {_KIND[notice.kind]}: {_code_name(code)} "
                               f"({code})")
                break
            self._busy = False
        self._close()


