"""Fixtures of cluster mode: a real ZooKeeper per test module, each test in a chroot
of its own on it, a kazoo client on that chroot, real brokers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.cluster.zkfixtures import kazoo
from tests.integration.conftest import broker, make_broker  # noqa: F401 - fixtures

_chroots = itertools.count()


class ChrootedZooKeeper:
    """The module's ZooKeeper as one test sees it: ``connect`` names the test's own
    chroot (brokers, clients and ``zk`` see only the test's nodes); ``stop``,
    ``start``, ``port`` and the rest are the server's (a module's tests run one
    after another, so a test may stop it for an outage and start it again)."""

    def __init__(self, server, chroot: str):
        self.server = server
        self.chroot = chroot

    @property
    def connect(self) -> str:
        return self.server.connect + self.chroot

    def __getattr__(self, name):
        return getattr(self.server, name)


@contextmanager
def broker_in_chroot(server, root, chroot: str, **settings) -> Iterator[tuple]:
    """Broker 1 with ``settings``, registered in ``chroot`` (made if missing) of the
    module's ``server``: ``(broker, its ChrootedZooKeeper)``, stopped at the end. For
    a module fixture shared by the tests that only read the cluster."""
    from hostbroker.cluster import paths
    from tests.cluster.test_discovery import wait_until
    from tests.integration.broker import Broker
    from tests.integration.wire_helpers import stop_or_kill

    with kazoo(server.connect) as top:
        top.ensure_path(chroot)
    zookeeper = ChrootedZooKeeper(server, chroot)
    started = Broker(root, **{**settings, "zookeeper.connect": zookeeper.connect,
                              "broker.id": 1}).start()
    try:
        with kazoo(zookeeper.connect) as zk:
            wait_until(lambda: zk.exists(paths.broker_path(1)) is not None)
        yield started, zookeeper
    finally:
        stop_or_kill(started)


@pytest.fixture
def zookeeper(zookeeper_of_module):
    """A ZooKeeper of this test's own: a chroot of its own on the module's server
    (started again first if a test before stopped it and did not start it)."""
    server = zookeeper_of_module
    if server.proc is None or server.proc.poll() is not None:
        server.proc = None
        server.start()
    else:
        server.resume()  # one left suspended (SIGSTOP) serves again
    chroot = f"/t{next(_chroots)}"
    with kazoo(server.connect) as root:
        root.ensure_path(chroot)
    return ChrootedZooKeeper(server, chroot)


@pytest.fixture
def zk(zookeeper):
    """A kazoo client on the test's ZooKeeper, to look at and change nodes directly."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect, timeout=5.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()
