"""Fixtures of cluster mode: a real ZooKeeper per test, a kazoo client on it, real brokers."""

from __future__ import annotations

import pytest

from tests.cluster.zkserver import ZooKeeperServer
from tests.integration.conftest import broker, make_broker  # noqa: F401 - fixtures


@pytest.fixture
def zookeeper(tmp_path):
    """A ZooKeeper of this test's own (stopped by PID after it)."""
    root = tmp_path / "zk"
    root.mkdir()
    server = ZooKeeperServer(root).start()
    yield server
    server.stop()


@pytest.fixture
def zk(zookeeper):
    """A kazoo client on the test's ZooKeeper, to look at and change nodes directly."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect, timeout=5.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()
