"""One follower's connection to one leader broker, in ``hb-replica``.

A :class:`LeaderLink` owns a non-blocking socket to the leader (its Unix
socket when the path the controller gave exists on this host, else TCP; with
``security.inter.broker.protocol`` SSL always TLS to the ``ssl://`` listener
the controller named, this broker's certificate shown and the leader's
verified against ``ssl.truststore.location``: the handshake runs in the
selector loop as the socket becomes ready, within ``ssl.handshake.timeout.ms``
from the connection, and a failed one is said in the log as a failed
connection), the
frames read off it and the one request it has at the leader at a time:
OFFSET_FOR_LEADER_EPOCH for the partitions about to be cut
(:mod:`.truncation`), else OFFSETS (earliest) for a partition whose log ends
below the leader's log start (a FETCH answered OFFSET_OUT_OF_RANGE with the
leader's log end past ours: retention or a delete there removed what it
lacks; the worker then has its writer restart the log at that start, only
when it is past our log end and at most the leader's stated log end), else
one FETCH v1 (``replica_id`` = this broker) for
every partition ready to fetch, long-polling at the leader
(``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``; at most 50 ms
while a partition of the link is at its writer, which the worker says in
:meth:`LeaderLink.step`). All links share
the worker's one selector, so a slow or silent leader holds up only its own
partitions.

What comes back is hostile until checked: an answer larger than the request
can bring, an error frame, a correlation id out of order, bytes that do not
decode or values out of range close the connection (the partitions it held
back off and start over; the link connects again after
``replica.fetch.backoff.ms``). A leader that does not answer within
``replica.socket.timeout.ms`` past the long poll is treated the same way.
One FETCH asks for at most ``replica.fetch.response.max.bytes`` over its
partitions: each partition's ``replica.fetch.max.bytes`` is shared out
(never below ``MIN_SHARE``; a partition whose next entry is larger asks for
all of it), and partitions that still do not fit wait for the next FETCH;
so no answer the follower takes is larger. A message set is cut to its
whole entries (a partial tail is fetched again);
the writer checks each entry as a handler checks a PRODUCE. The requests and
the checks of their answers are :mod:`.link_requests`'s (this module owns the
connection: socket, TLS, frames, deadlines); what to do with a partition's
answer is the worker's (:class:`Sink`).

A leader's host name is resolved off the loop (:mod:`.resolver`), so a slow
name server holds up nothing.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import ssl
import stat
import struct
from collections.abc import Callable
from typing import Protocol

from hostbroker.errors import ProtocolError
from hostbroker.workers.replication import resolver as names
from hostbroker.workers.replication.follows import AT_LEADER, Follow, Stage
from hostbroker.workers.replication.link_requests import LinkRequests, Refused
from hostbroker.workers.tls import inter_broker_context, inter_broker_ssl

_LENGTH = struct.Struct(">i")
_RESOLVING_S = 0.02  # how often a link whose leader's name is being resolved looks again
TLS_CHUNK = 256 * 1024  # the most written through TLS in one call (the same again after a want)
_TLS_WANT = (ssl.SSLWantReadError, ssl.SSLWantWriteError)


class Sink(Protocol):
    """What the worker does with a partition's answer."""

    def append(self, follow: Follow, data_epoch: int, leader_hw: int, data) -> None: ...
    def truncate(self, follow: Follow, offset: int) -> None: ...
    def restart(self, follow: Follow, offset: int) -> None: ...
    def failed(self, follow: Follow, why: str | None) -> None: ...
    def link_failed(self, link: "LeaderLink", why: str) -> None: ...


class Settings:
    """The follower's settings, read once (``replica.*`` in hostbroker/config.py)."""

    def __init__(self, config):
        self.broker_id = config["broker.id"]
        self.max_bytes = config["replica.fetch.max.bytes"]
        self.response_max = config["replica.fetch.response.max.bytes"]
        self.wait_ms = config["replica.fetch.wait.max.ms"]
        self.min_bytes = config["replica.fetch.min.bytes"]
        self.timeout_s = config["replica.socket.timeout.ms"] / 1000
        self.backoff_s = config["replica.fetch.backoff.ms"] / 1000
        self.largest_fetch = config["socket.request.max.bytes"]
        self.handshake_s = config["ssl.handshake.timeout.ms"] / 1000
        # security.inter.broker.protocol SSL: the broker's one client context
        # (its files checked by the supervisor before any fork), else None
        self.tls: ssl.SSLContext | None = None
        if inter_broker_ssl(config):
            self.tls = inter_broker_context(config)


def endpoint(peer, tls: bool = False) -> tuple | None:
    """``("unix", path)`` when the peer's Unix socket is on this host, else
    ``("tcp", host, port)``; with ``tls`` always ``("ssl", host, port)`` (the
    point of TLS is the certificate: never the Unix socket); None when the peer
    gave none of those."""
    if peer is None:
        return None
    if tls:
        host, port = peer.ssl_host, peer.ssl_port
        return ("ssl", host, port) if host and 0 < port <= 65535 else None
    unix = peer.unix or ""
    if unix:
        try:
            if stat.S_ISSOCK(os.stat(unix).st_mode):
                return "unix", unix
        except (OSError, ValueError):
            pass
    if peer.host and 0 < peer.port <= 65535:
        return "tcp", peer.host, peer.port
    return None


class LeaderLink(LinkRequests):
    def __init__(self, leader: int, settings: Settings, sink: Sink,
                 find_peer: Callable[[int], object], selector: selectors.BaseSelector,
                 resolver: names.Resolver | None = None):
        self.leader = leader
        self.resolver = resolver or names.shared()  # host names, resolved off the loop
        self.selector = selector  # the worker's: the socket is registered with itself as data
        self.settings = settings
        self.sink = sink
        self.find_peer = find_peer
        self.follows: dict[tuple[str, int], Follow] = {}
        self.sock: socket.socket | None = None
        self.connecting = False
        self.tls = settings.tls  # the client context under SSL, else None
        self.handshaking = False  # a TLS handshake under way (after the connect)
        self.wants_write = False  # what the handshake waits for
        self.write_wants_read = False  # a TLS write waits for the peer's next record
        self.out = bytearray()
        self.head = bytearray(4)  # the size prefix of the answer being read
        self.body: bytearray | None = None  # the answer being read, once its size is known
        self.got = 0  # bytes of head (or body) read so far
        self.bound = 0  # the largest answer the request at the leader can bring
        # (correlation id, FETCH or EPOCHS, {key: follow}, deadline)
        self.inflight: tuple[int, str, dict, float] | None = None
        self.deadline = 0.0  # of the connect, while connecting
        self.retry_at = 0.0
        self.correlation = 0
        self.client_id = f"hb-replica-{settings.broker_id}"
        self.registered = 0  # the selector mask registered (0: not registered)
        self.said = False  # a connection failure was logged (once per link)
        self.requests = 0
        self.bytes_in = 0
        self.rotation = 0  # where the next FETCH starts among the partitions ready
        self.asked: dict[tuple[str, int], int] = {}  # max_bytes of each partition at the leader

    # -- the socket -----------------------------------------------------
    def mask(self) -> int:
        if self.sock is None:
            return 0
        if self.connecting:
            return selectors.EVENT_WRITE
        if self.handshaking:
            return selectors.EVENT_WRITE if self.wants_write else selectors.EVENT_READ
        # (a TLS write that wants a read first waits for one: writable says nothing)
        wants = self.out and not self.write_wants_read
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if wants else 0)

    def wake_at(self) -> float | None:
        """When the loop must step this link though its socket says nothing:
        its retry, its connect's or handshake's deadline, its request's."""
        if self.sock is None:
            return self.retry_at if self.follows else None
        if self.connecting or self.handshaking:
            return self.deadline
        return self.inflight[3] if self.inflight is not None else None

    def sync(self) -> None:
        """Register the socket for what it waits for now (after each step)."""
        mask = self.mask()
        if self.sock is None or mask == self.registered:
            return
        if self.registered:
            self.selector.modify(self.sock, mask, self)
        else:
            self.selector.register(self.sock, mask, self)
        self.registered = mask

    def _connect(self, now: float) -> None:
        try:
            peer = self.find_peer(self.leader)
        except Exception:  # noqa: BLE001 - a slot being repaired: as if unknown for now
            peer = None
        where = endpoint(peer, self.tls is not None)
        if where is None:
            self.retry_at = now + self.settings.backoff_s
            self.sink.link_failed(self, f"no {'ssl:// ' if self.tls else ''}endpoint known "
                                        f"for broker {self.leader}")
            return
        if where[0] == "unix":
            family, address = socket.AF_UNIX, where[1]
        else:
            found = self.resolver.lookup(where[1], where[2])
            if found is None:  # a name being resolved off the loop: look again shortly
                self.retry_at = now + _RESOLVING_S
                return
            if isinstance(found, str):
                self.retry_at = now + self.settings.backoff_s
                self.sink.link_failed(self, f"cannot connect to broker {self.leader}: {found}")
                return
            family, address = found
        sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.setblocking(False)
        try:
            if self.tls is not None:  # (the handshake waits for the connection)
                sock = self.tls.wrap_socket(sock, server_hostname=where[1],
                                            do_handshake_on_connect=False)
            code = sock.connect_ex(address)
        except (OSError, ValueError) as e:  # a bad path, an address refused at once
            sock.close()
            self.retry_at = now + self.settings.backoff_s
            self.sink.link_failed(self, f"cannot connect to broker {self.leader}: {e}")
            return
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN):
            sock.close()
            self.retry_at = now + self.settings.backoff_s
            self.sink.link_failed(self, f"cannot connect to broker {self.leader}: "
                                        f"{os.strerror(code)}")
            return
        if family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.connecting = code != 0
        self.handshaking = self.tls is not None
        self.wants_write = True
        self.deadline = now + (self.settings.timeout_s if self.connecting
                               else self.settings.handshake_s)
        self.body, self.got = None, 0
        self.out.clear()

    def close(self, now: float, why: str | None = None) -> None:
        """Drop the connection; what was at the leader backs off. With ``why``,
        the link itself waits ``replica.fetch.backoff.ms`` before connecting."""
        if self.sock is not None:
            if self.registered:
                self.selector.unregister(self.sock)
                self.registered = 0
            self.sock.close()
            self.sock = None
        self.connecting = self.handshaking = self.write_wants_read = False
        self.out.clear()
        inflight, self.inflight = self.inflight, None
        if why is not None:
            self.retry_at = now + self.settings.backoff_s
            self.sink.link_failed(self, why)
        if inflight is not None:
            for follow in inflight[2].values():
                if not follow.dropped and follow.stage in AT_LEADER:
                    self.sink.failed(follow, None)  # (the link's failure is said once)

    def on_ready(self, events: int, now: float) -> None:
        """The selector says the socket is ready for ``events``."""
        if self.sock is None:
            return
        if self.connecting:
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self.close(now, f"cannot connect to broker {self.leader}: {os.strerror(code)}")
                return
            self.connecting = False
            if self.handshaking:
                self.deadline = now + self.settings.handshake_s
        if self.handshaking:
            self._handshake(now)
            return
        if events & selectors.EVENT_WRITE and self.out:
            self._write(now)
        if self.sock is not None and events & selectors.EVENT_READ:
            self._read(now)
            if self.write_wants_read and self.sock is not None:
                self.write_wants_read = False
                self._write(now)

    def _handshake(self, now: float) -> None:
        """One step of the TLS handshake, as the socket became ready for it."""
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.wants_write = False
            return
        except ssl.SSLWantWriteError:
            self.wants_write = True
            return
        except (ssl.SSLError, OSError, ValueError) as e:
            reason = getattr(e, "verify_message", None) or getattr(e, "reason", None) or e
            self.close(now, f"TLS handshake with broker {self.leader} failed: {reason}")
            return
        self.handshaking = False
        if self.out:  # (a request queued meanwhile)
            self._write(now)

    def _write(self, now: float) -> None:
        if self.handshaking or self.connecting:
            return  # (sent once the connection is up)
        try:
            if self.tls is not None:
                sent = self.sock.send(self.out[:TLS_CHUNK])
            else:
                sent = self.sock.send(self.out)
        except ssl.SSLWantReadError:
            self.write_wants_read = True  # (until a read: mask() drops EVENT_WRITE)
            return
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
            return
        except OSError as e:
            self.close(now, f"broker {self.leader}: {e.strerror or e}")
            return
        del self.out[:sent]

    def _read(self, now: float) -> None:
        """Read answers straight into a buffer of each one's size (its size
        prefix checked against what the request can bring first): no copy."""
        while self.sock is not None:
            body = self.body
            if body is None:
                view = memoryview(self.head)[self.got:]
            else:
                view = memoryview(body)[self.got:]
            try:
                n = self.sock.recv_into(view)
            except (BlockingIOError, InterruptedError, *_TLS_WANT):
                return
            except OSError as e:
                self.close(now, f"broker {self.leader}: {e.strerror or e}")
                return
            if not n:
                self.close(now, f"broker {self.leader} closed the connection")
                return
            self.bytes_in += n
            self.got += n
            if n < len(view):
                if self.tls is None:
                    return  # the socket has no more for now
                continue  # TLS gives a record at a time: read on until it wants more
            try:
                if body is None:
                    (size,) = _LENGTH.unpack(self.head)
                    if not 0 <= size <= self.bound:
                        raise ProtocolError(f"an answer of {size} bytes, over the "
                                            f"{self.bound} its request can bring")
                    self.body, self.got = bytearray(size), 0
                    if size:
                        continue
                frame, self.body, self.got = self.body, None, 0
                self._answer(frame, now)
            except Refused as e:  # (e.g. CLUSTER_AUTHORIZATION_FAILED: not a broker to it)
                self.close(now, f"broker {self.leader} refused the request: {e}")
                return
            except ProtocolError as e:
                self.close(now, f"broker {self.leader} sent what is not an answer: {e}")
                return

    # -- requests ---------------------------------------------------------
    def step(self, now: float, writer_busy: bool, wait_cap_ms: int | None = None) -> None:
        """Connect, time out, or send the next request if none is at the leader.
        ``writer_busy``: a partition of this link has just gone to its writer,
        so no FETCH goes now (its next one would wait behind a long poll).
        ``wait_cap_ms``: a partition of this link is still at its writer, so a
        FETCH sent now long-polls at most this long (else the partition, back
        from its writer, would wait the whole ``replica.fetch.wait.max.ms``
        behind it, and with it every acks=-1 produce its leader holds)."""
        if not self.follows:
            if self.sock is not None:
                self.close(now)
            return
        if self.sock is None:
            if now >= self.retry_at:
                self._connect(now)
            return
        if self.connecting:
            if now > self.deadline:
                self.close(now, f"broker {self.leader} did not accept the connection within "
                                "replica.socket.timeout.ms")
            return
        if self.handshaking:
            if now > self.deadline:
                self.close(now, f"TLS handshake with broker {self.leader} not done within "
                                "ssl.handshake.timeout.ms")
            return
        if self.inflight is not None:
            if now > self.inflight[3]:
                self.close(now, f"broker {self.leader} did not answer within "
                                "replica.socket.timeout.ms")
            return
        asks = [f for f in self.follows.values()
                if f.stage is Stage.EPOCH and f.truncation is not None
                and f.truncation.asked is not None]
        if asks:
            self._send_epochs(asks, now)
            return
        start = next((f for f in self.follows.values() if f.stage is Stage.START), None)
        if start is not None:
            self._send_start(start, now)
            return
        if writer_busy:
            return
        fetches = [f for f in self.follows.values() if f.stage is Stage.FETCH]
        if fetches:
            self._send_fetch(fetches, now, wait_cap_ms)
