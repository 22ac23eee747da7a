"""A leader's host name is resolved off hb-replica's selector loop
(hostbroker/workers/replication/resolver.py): connecting never waits for a
name server. The slow name server is a fake (it cannot be made slow for
real here); the sockets and the link are real."""

import selectors
import socket
import threading
import time

from hostbroker.shm.peers import Peer
from hostbroker.workers.replication.fetcher import LeaderLink, Settings
from hostbroker.workers.replication.resolver import Resolver


class SlowNames:
    """A name server that answers ``leader.test`` with 127.0.0.1 once released."""

    def __init__(self):
        self.release = threading.Event()
        self.asked = 0

    def __call__(self, host, port, type=0, **kw):
        self.asked += 1
        self.release.wait(10)
        if host != "leader.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return socket.getaddrinfo("127.0.0.1", port, type=type)


class Failures:
    def __init__(self):
        self.why = []

    def link_failed(self, link, why):
        self.why.append(why)

    def failed(self, follow, why):
        pass


SETTINGS = {"broker.id": 2, "replica.fetch.max.bytes": 1 << 20,
            "replica.fetch.response.max.bytes": 10 << 20, "replica.fetch.wait.max.ms": 500,
            "replica.fetch.min.bytes": 1, "replica.socket.timeout.ms": 30000,
            "replica.fetch.backoff.ms": 1000, "socket.request.max.bytes": 100 << 20,
            "ssl.handshake.timeout.ms": 10000, "security.inter.broker.protocol": "PLAINTEXT"}


def test_a_numeric_address_is_answered_at_once_and_a_name_never_blocks():
    slow = SlowNames()
    resolver = Resolver(slow)
    assert resolver.lookup("127.0.0.1", 9092) == (socket.AF_INET, ("127.0.0.1", 9092))
    assert resolver.lookup("::1", 9092)[0] == socket.AF_INET6
    started = time.monotonic()
    assert resolver.lookup("leader.test", 9092) is None
    assert resolver.lookup("leader.test", 9092) is None  # asked once, not twice
    assert time.monotonic() - started < 0.5
    slow.release.set()
    deadline = time.monotonic() + 5
    while (found := resolver.lookup("leader.test", 9092)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert found == (socket.AF_INET, ("127.0.0.1", 9092))
    assert slow.asked == 1
    assert resolver.lookup("nowhere.test", 1) is None
    while (failed := resolver.lookup("nowhere.test", 1)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert "cannot resolve 'nowhere.test'" in failed


def test_a_link_to_a_named_leader_connects_once_the_name_is_resolved():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    slow = SlowNames()
    sink = Failures()
    with selectors.DefaultSelector() as selector:
        link = LeaderLink(7, Settings(SETTINGS), sink,
                          lambda _: Peer(7, "leader.test", port, ""), selector, Resolver(slow))
        link.follows[("t", 0)] = object()
        started = time.monotonic()
        link.step(started, False)
        assert time.monotonic() - started < 0.5  # the loop did not wait for the name
        assert link.sock is None and sink.why == []
        assert link.retry_at - started < 0.1  # it looks again shortly
        slow.release.set()
        deadline = time.monotonic() + 5
        while link.sock is None:
            assert time.monotonic() < deadline, sink.why
            time.sleep(0.02)
            link.step(time.monotonic(), False)
        conn, _ = server.accept()
        conn.close()
        link.close(time.monotonic())
    server.close()
    assert sink.why == []
