"""The ``hb-http`` process loop: the HTTP listening sockets and their connections.

Owns: ``plan.http_listeners`` in this process (bound by the supervisor before
the fork; a replaced hb-http listens on the very same sockets), every HTTP
connection, and its slot on the process board. One selector holds the
listeners, the connections and the worker's doorbell (rung for a stop);
each round it heartbeats like every worker, then applies the timeouts.

Reads and writes sockets only; the answers come from the
:class:`~.server.HttpConnection` of each connection and the
:class:`~.router.Router` that :func:`~.routes.build_router` made over an
:class:`~.context.HttpContext`. A connection past ``http.max.connections``,
or past ``http.max.connections.per.client`` from its peer's IP address
(:func:`client_key`: an IPv4 peer is one client whether it comes as IPv4 or
as IPv4-mapped IPv6), is answered 503 (one non-blocking write of a short
answer) and closed at once; a connection frees its place when it closes.
While the answers held for all connections (not yet taken by their clients)
pass ``http.output.max.bytes``, a new request is answered 503 instead of its
page (:meth:`HttpWorker.owed_bytes`), so clients that do not read bound
hb-http's memory together, not only one by one.

Board counters of this slot: ``REQUESTS`` (answers), ``ERRORS`` (answers
4xx and 5xx, and connections refused), ``BYTES_IN`` and ``BYTES_OUT``. The
broker's ``CONNECTIONS`` gauge is left to the Kafka listeners: an HTTP
connection is not a client of the log.
"""

from __future__ import annotations

import ipaddress
import selectors
import socket
import sys
import time
import traceback

from hostbroker.shm import procs
from hostbroker.workers.base import Worker
from hostbroker.workers.http.context import HttpContext
from hostbroker.web.router import Request, error_response
from hostbroker.web.server import HttpConnection, Limits, encode_response

_TICK_S = 0.25  # timeouts are applied this often at least
_IDLE_TICK_S = 1.0  # the loop's round (for the heartbeat) without a connection
_READ_BYTES = 65536
_ACCEPT_BURST = 64


class HttpWorker(Worker):
    kind = "http"
    process_name = "hb-http"

    @property
    def name(self) -> str:
        return self.process_name  # one per broker, as the acceptor

    def init_process(self) -> None:
        super().init_process()
        from hostbroker.workers.http.routes import build_router

        self.limits = Limits.from_config(self.config)
        self.max_connections = self.config["http.max.connections"]
        self.max_per_client = self.config["http.max.connections.per.client"]
        self.max_owed = self.config["http.output.max.bytes"]
        self.per_client: dict[str, int] = {}  # client_key -> connections open
        self.clients: dict[int, str] = {}  # fd -> client_key of its connection
        self.context = HttpContext(self.plan)
        acting = self.context.acting_as()  # (when not the broker's own user)
        if acting is not None:
            print(f"hostbroker: {acting}", file=sys.stderr, flush=True)
        self.context.answer_held = self._held
        self.router = build_router(self.context)
        self.router.on_error = self._page_failed
        self.conns: dict[int, tuple[socket.socket, HttpConnection]] = {}
        # connections whose answer went out while their next request waits:
        # each is advanced once in the next round (one request per connection
        # per round, so a pipeliner never holds the loop)
        self.ready: set[int] = set()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.doorbell.fileno(), selectors.EVENT_READ, None)
        for _, listener in self.plan.http_listeners:
            listener.setblocking(False)
            self.sel.register(listener.fileno(), selectors.EVENT_READ, listener)
        self.board.set_state(self.slot, procs.WORKER_READY)

    def run(self) -> None:
        while not self.stopping:
            # with connections open, their timeouts are applied every tick; with
            # a pipelined request waiting, the round does not wait at all
            events = self.sel.select(0 if self.ready else
                                     _TICK_S if self.conns else _IDLE_TICK_S)
            due, self.ready = self.ready, set()  # those of the rounds before: advanced now
            start = time.monotonic_ns()
            if events:
                self.sleeper.wakeups += 1  # published with the other timings
            for key, mask in events:
                data = key.data
                if data is None:
                    self.doorbell.drain()
                elif isinstance(data, socket.socket):
                    self._accept(data)
                else:
                    self._serve(data, mask)
            self._advance_ready(due)
            self._expire(time.monotonic())
            self.heartbeat()
            if events:
                self.work_ns += time.monotonic_ns() - start
        for fd in list(self.conns):
            self._close(fd)
        for _, listener in self.plan.http_listeners:
            listener.close()
        self.context.close()

    # -- connections ----------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPT_BURST):
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.count(procs.ERRORS)
                return
            if len(self.conns) >= self.max_connections:
                self._refuse(sock, "too many HTTP connections (http.max.connections)")
                continue
            client = client_key(address)
            if self.per_client.get(client, 0) >= self.max_per_client:
                self._refuse(sock, "too many HTTP connections from this address "
                                   "(http.max.connections.per.client)")
                continue
            sock.setblocking(False)
            peer = _peer(address)
            conn = HttpConnection(self.router, self.limits, peer, time.monotonic(),
                                  overloaded=self._overloaded)
            fd = sock.fileno()
            self.conns[fd] = (sock, conn)
            self.clients[fd] = client
            self.per_client[client] = self.per_client.get(client, 0) + 1
            self.sel.register(fd, selectors.EVENT_READ, fd)

    def _refuse(self, sock: socket.socket, reason: str) -> None:
        self.count(procs.ERRORS)
        answer = encode_response(error_response(503, reason), 4096, close=True)
        try:
            sock.setblocking(False)
            sock.send(answer)
        except OSError:
            pass
        sock.close()

    def _serve(self, fd: int, mask: int) -> None:
        if fd not in self.conns:  # closed earlier in this round
            return
        sock, conn = self.conns[fd]
        now = time.monotonic()
        if mask & selectors.EVENT_READ and conn.wants_read:
            try:
                data = sock.recv(_READ_BYTES)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                self._close(fd)
                return
            if data is not None:
                self.count(procs.BYTES_IN, len(data))
                conn.received(data, now)
        if conn.output:
            self._write(fd, sock, conn, now)
        else:
            self._settle(fd, sock, conn)

    def _advance_ready(self, due: set[int]) -> None:
        """One request of each connection whose answer went out in an earlier
        round while its next request waited."""
        for fd in due:
            if fd not in self.conns:
                continue
            sock, conn = self.conns[fd]
            now = time.monotonic()
            conn.advance(now)
            if conn.output:
                self._write(fd, sock, conn, now)
            else:
                self._settle(fd, sock, conn)

    def _write(self, fd: int, sock: socket.socket, conn: HttpConnection, now: float) -> None:
        # one answer goes out in as many writes as the socket takes; a pipelined
        # request after it waits for the next round (_advance_ready)
        while conn.output:
            self._count(conn)  # before the answer leaves: a client that has it sees it counted
            try:
                n = sock.send(conn.output)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._close(fd)
                return
            self.count(procs.BYTES_OUT, n)
            conn.sent(n, now)
        self._settle(fd, sock, conn)

    def _count(self, conn: HttpConnection) -> None:
        for status in conn.statuses:
            self.count(procs.REQUESTS)
            if status >= 400:
                self.count(procs.ERRORS)
        conn.statuses.clear()

    def _settle(self, fd: int, sock: socket.socket, conn: HttpConnection) -> None:
        """Close, or wait for what comes next."""
        self._count(conn)
        if conn.done:
            self._close(fd)
            return
        if conn.ready:
            self.ready.add(fd)
        events = (selectors.EVENT_READ if conn.wants_read else 0) | (
            selectors.EVENT_WRITE if conn.output else 0)
        if events == 0:
            if conn.ready:  # a whole input waits for its round; left as registered
                return
            self._close(fd)  # nothing to read nor write yet not done: cannot happen
            return
        if self.sel.get_key(fd).events != events:
            self.sel.modify(fd, events, fd)

    def _close(self, fd: int) -> None:
        sock, _ = self.conns.pop(fd)
        self.ready.discard(fd)
        client = self.clients.pop(fd)
        left = self.per_client.pop(client) - 1
        if left > 0:
            self.per_client[client] = left
        try:
            self.sel.unregister(fd)
        except (KeyError, ValueError):
            pass
        sock.close()

    def _expire(self, now: float) -> None:
        for fd, (sock, conn) in list(self.conns.items()):
            if conn.expired(now):
                self._close(fd)
            elif conn.output:
                self._write(fd, sock, conn, now)  # a 408 to send

    def owed_bytes(self) -> int:
        """The bytes of answers held for all connections (a body several answers
        share, as concurrent scrapes do, counted once)."""
        objects = {}
        for _, conn in self.conns.values():
            for obj in conn.owed_objects():
                objects[id(obj)] = obj
        return sum(memoryview(obj).nbytes for obj in objects.values())

    def _held(self, obj: object) -> bool:
        return any(owed is obj for _, conn in self.conns.values()
                   for owed in conn.owed_objects())

    def _overloaded(self) -> str | None:
        if self.owed_bytes() < self.max_owed:
            return None
        return ("hb-http holds more answers not yet read than http.output.max.bytes; "
                "try again")

    def _page_failed(self, request: Request, error: BaseException) -> None:
        print(f"hostbroker: hb-http: {request.method} {request.path[:200]} failed:",
              file=sys.stderr, flush=True)
        traceback.print_exception(error, file=sys.stderr)
        sys.stderr.flush()


def client_key(address) -> str:
    """The client a peer ``address`` (as ``accept`` gives it) counts against for
    ``http.max.connections.per.client``: its IP address in one canonical form,
    an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``) as the IPv4 address it maps,
    an IPv6 scope (``%eth0``) left out."""
    host = address[0] if isinstance(address, tuple) and address else str(address)
    try:
        ip = ipaddress.ip_address(str(host).partition("%")[0])
    except ValueError:
        return str(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _peer(address) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host = address[0]
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return str(address)
