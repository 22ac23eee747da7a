"""``hostbroker acls --zookeeper`` and ``hostbroker quotas --zookeeper`` (docs/tools.md):
a cluster's ACLs and quotas changed where every broker reads them, run as a user
would against a real ZooKeeper."""

from __future__ import annotations

import json

from hostbroker.cluster import acls_zk_store as store
from hostbroker.security.acl import Operation
from tests.cluster.zkfixtures import cluster, zkserver  # noqa: F401 - fixtures
from tests.integration.cli import hostbroker, one_line_error


def test_acls_added_listed_and_removed_in_zookeeper(cluster):
    connect, zk = cluster
    done = hostbroker("acls", "add", "--zookeeper", connect, "--allow-principal", "User:alice",
                      "--operation", "Read", "--operation", "Describe", "--topic", "orders")
    assert done.returncode == 0, done.stderr
    kept = store.list_acls(zk)
    assert {(str(b.principal), b.operation, b.name) for b in kept} == {
        ("User:alice", Operation.DESCRIBE, "orders"), ("User:alice", Operation.READ, "orders")}
    assert zk.exists("/kafka-acl/Topic/orders") and zk.get_children("/kafka-acl-changes")
    listed = hostbroker("acls", "list", "--zookeeper", connect, "--topic", "orders", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["acls"]) == 2
    gone = hostbroker("acls", "remove", "--zookeeper", connect, "--allow-principal",
                      "User:alice", "--operation", "Read", "--topic", "orders")
    assert gone.returncode == 0, gone.stderr
    assert [b.operation for b in store.list_acls(zk)] == [Operation.DESCRIBE]


def test_quotas_set_and_listed_in_zookeeper(cluster):
    connect, zk = cluster
    done = hostbroker("quotas", "set", "--zookeeper", connect, "--principal", "User:alice",
                      "--producer-byte-rate", "1048576")
    assert done.returncode == 0, done.stderr
    assert store.list_quotas(zk).of("User:alice").producer_byte_rate == 1048576
    listed = hostbroker("quotas", "list", "--zookeeper", connect, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["quotas"] == [
        {"entity": "User:alice", "producer_byte_rate": 1048576}]
    group = hostbroker("quotas", "set", "--zookeeper", connect, "--principal", "Group:ops",
                       "--request-rate", "5")
    assert group.returncode == 2 and "User" in one_line_error(group)


def test_one_place_to_change_them(cluster):
    connect, _ = cluster
    both = hostbroker("acls", "list", "--zookeeper", connect, "--bootstrap", "tcp://127.0.0.1:1")
    assert both.returncode == 2 and "not allowed with" in both.stderr.decode()
    bad = hostbroker("acls", "list", "--zookeeper", "not a connect string")
    assert bad.returncode == 2 and "--zookeeper" in one_line_error(bad)
