"""Fixtures of the replication tests: cluster mode's (a real ZooKeeper per test, a kazoo
client on it, real brokers)."""

from tests.cluster.conftest import zk, zookeeper  # noqa: F401 - fixtures
from tests.integration.conftest import broker, make_broker  # noqa: F401 - fixtures
