"""hb-replica's link to a leader under security.inter.broker.protocol SSL
(hostbroker/workers/replication/fetcher.py): real sockets and a real TLS
leader, the link driven as the worker's selector loop drives it."""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time

from hostbroker.shm.peers import Peer
from hostbroker.workers.replication.fetcher import LeaderLink, Settings, endpoint
from tests.tls.certs import broker_certificate

BASE = {"broker.id": 2, "replica.fetch.max.bytes": 1 << 20,
        "replica.fetch.response.max.bytes": 10 << 20, "replica.fetch.wait.max.ms": 500,
        "replica.fetch.min.bytes": 1, "replica.socket.timeout.ms": 30000,
        "replica.fetch.backoff.ms": 1000, "socket.request.max.bytes": 100 << 20,
        "ssl.handshake.timeout.ms": 300, "security.inter.broker.protocol": "SSL",
        "ssl.key.password": "", "ssl.endpoint.identification.algorithm": "https",
        "ssl.enabled.protocols": "TLSv1.2,TLSv1.3", "ssl.cipher.suites": ""}


class Failures:
    def __init__(self):
        self.why: list[str] = []

    def link_failed(self, link, why):
        self.why.append(why)

    def failed(self, follow, why):
        pass


def _settings(certs) -> Settings:
    return Settings({**BASE, "ssl.keystore.location": broker_certificate(certs, "broker2"),
                     "ssl.truststore.location": certs.ca})


def _drive(link, selector, until, timeout=10.0) -> None:
    """As hb-replica's loop: select until the link's own wake-up time (never a
    poll of our own), then step it."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the link did not get there in time"
        at = link.wake_at()
        wait = 5.0 if at is None else max(0.0, at - time.monotonic())
        for key, events in selector.select(wait):
            key.data.on_ready(events, time.monotonic())
        link.step(time.monotonic(), False)
        link.sync()


def test_under_tls_the_unix_socket_is_never_taken(tmp_path):
    path = str(tmp_path / "leader.sock")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)
        peer = Peer(7, "127.0.0.1", 9092, path, "127.0.0.1", 9093)
        assert endpoint(peer) == ("unix", path)
        assert endpoint(peer, tls=True) == ("ssl", "127.0.0.1", 9093)
        assert endpoint(Peer(7, "127.0.0.1", 9092, path), tls=True) is None
        # PLAINTEXT takes the plain listeners only, never the ssl:// one
        assert endpoint(Peer(7, "", -1, "", "127.0.0.1", 9093)) is None


def test_a_leader_silent_in_the_handshake_is_left_after_the_handshake_timeout(certs):
    server = socket.create_server(("127.0.0.1", 0))  # accepts, says nothing
    sink = Failures()
    with selectors.DefaultSelector() as selector:
        link = LeaderLink(7, _settings(certs), sink,
                          lambda _: Peer(7, "", -1, "", "127.0.0.1", server.getsockname()[1]), selector)
        link.follows[("t", 0)] = object()
        started = time.monotonic()
        _drive(link, selector, lambda: sink.why)
        # (woken by the handshake's own deadline: not a second later)
        assert 0.3 <= time.monotonic() - started < 0.9
        assert sink.why == ["TLS handshake with broker 7 not done within "
                            "ssl.handshake.timeout.ms"]
        assert link.sock is None
    server.close()


def test_a_leader_whose_certificate_does_not_name_it_is_refused(certs):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.keystore("elsewhere"))  # names elsewhere.test only
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            try:
                context.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    sink = Failures()
    try:
        with selectors.DefaultSelector() as selector:
            link = LeaderLink(7, _settings(certs), sink,
                              lambda _: Peer(7, "", -1, "", "127.0.0.1", server.getsockname()[1]),
                              selector)
            link.follows[("t", 0)] = object()
            _drive(link, selector, lambda: sink.why)
            (why,) = sink.why
            assert why.startswith("TLS handshake with broker 7 failed:") and "127.0.0.1" in why
            assert link.sock is None and not link.handshaking
    finally:
        stop.set()
        thread.join(5)
        server.close()


class _WantsRead:
    """A TLS socket whose write wants the peer's next record first (a TLS
    key update or renegotiation the peer started: not caused here for real)."""

    def __init__(self):
        self.sends = 0

    def send(self, data):
        self.sends += 1
        raise ssl.SSLWantReadError()

    def recv_into(self, view):
        raise ssl.SSLWantReadError()


def test_a_write_that_wants_a_read_waits_for_one(certs):
    with selectors.DefaultSelector() as selector:
        link = LeaderLink(7, _settings(certs), Failures(), lambda _: None, selector)
        link.sock = fake = _WantsRead()
        link.out += b"request"
        assert link.mask() & selectors.EVENT_WRITE
        link.on_ready(selectors.EVENT_WRITE, time.monotonic())
        # writable says nothing now: no busy loop on select until the peer speaks
        assert link.mask() == selectors.EVENT_READ and fake.sends == 1
        link.on_ready(selectors.EVENT_READ, time.monotonic())
        assert fake.sends == 2  # (tried again after the read)
        link.sock = None
