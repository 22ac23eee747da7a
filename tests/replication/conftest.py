"""Fixtures of the replication tests: cluster mode's (a real ZooKeeper per test, a kazoo
client on it, real brokers)."""

import pytest

from tests.cluster.conftest import zk, zookeeper  # noqa: F401 - fixtures
from tests.integration.conftest import broker, make_broker  # noqa: F401 - fixtures
from tests.replication.support import SETTINGS, poll


@pytest.fixture
def cluster(make_broker, tmp_path, zookeeper, zk):
    """Brokers 1, 2, 3 registered in the test's ZooKeeper."""
    brokers = {}
    for broker_id in (1, 2, 3):
        root = tmp_path / f"b{broker_id}"
        root.mkdir()
        brokers[broker_id] = make_broker(root=root, **{
            **SETTINGS, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id})
    poll(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"],
         what="three brokers registered")
    poll(lambda: zk.exists("/controller") is not None, what="a controller")
    return brokers
