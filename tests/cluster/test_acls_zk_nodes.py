"""A change or a narrow listing of a cluster's ACLs reads the nodes it concerns,
not the whole layout (hostbroker/cluster/acls_zk_store.py). A node that is not an
ACL node stands in for "read": one the operation does not concern is never read,
so it is never reported, and it never stops the operation. A real ZooKeeper (one
for the module, a chroot per test)."""

from __future__ import annotations

import pytest

from hostbroker.cluster import acls_zk_store as store
from hostbroker.security.acl import (AclBinding, AclFilter, Operation, PatternType,
                                     Permission, ResourceType)
from hostbroker.security.principals import Principal
from tests.cluster.zkfixtures import cluster, kazoo, zkserver  # noqa: F401 - fixtures

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE, MATCH = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH
BAD = "/kafka-acl/Topic/zz-unreadable"


def acl(name="orders", pattern=LIT, who="User:alice", rtype=T) -> AclBinding:
    return AclBinding.checked(rtype, name, pattern, Principal.parse(who), "*",
                              Operation.READ, Permission.ALLOW)


@pytest.fixture
def layout_with_a_bad_node(cluster):
    _, zk = cluster
    kept = [acl(), acl(who="User:bob"), acl("*"), acl("ord", PRE), acl("o", PRE),
            acl("other", PRE), acl("orders-eu"), acl("orders", rtype=G)]
    store.add_acls(zk, kept)
    zk.create(BAD, b"{not json")
    return zk, kept


def test_a_listing_of_one_resource_reads_its_nodes_only(layout_with_a_bad_node):
    zk, kept = layout_with_a_bad_node
    said = []

    def listing(**f):
        return store.list_acls(zk, AclFilter(**f), report=lambda p, line: said.append(p))

    assert listing(resource_type=T, name="orders", pattern=LIT) == sorted(kept[:2])
    assert listing(name="orders", pattern=LIT) == sorted([*kept[:2], kept[7]])
    assert listing(resource_type=T, name="orders", pattern=MATCH) == sorted(kept[:5])
    assert listing(resource_type=T, name="ord", pattern=PRE) == [kept[3]]
    assert said == []  # the bad node was not read
    assert listing(resource_type=T) and said == [BAD]  # every Topic node: read, said


def test_an_add_reads_the_nodes_it_changes_only(layout_with_a_bad_node):
    zk, kept = layout_with_a_bad_node
    carol = acl(who="User:carol")
    assert store.add_acls(zk, [carol]) == [carol]  # beside the bad node
    with pytest.raises(ValueError, match=f"{BAD}.*nothing changed"):
        store.add_acls(zk, [acl("orders-us"), acl("zz-unreadable")])
    assert zk.exists("/kafka-acl/Topic/orders-us") is None  # nothing of it written
    assert zk.get(BAD)[0] == b"{not json"


def test_a_removal_reads_the_nodes_its_filters_may_match(layout_with_a_bad_node):
    zk, kept = layout_with_a_bad_node
    said = []
    removed = store.remove_acls(zk, [AclFilter(resource_type=T, name="orders", pattern=LIT,
                                               principal=Principal.parse("User:bob"))],
                                report=lambda p, line: said.append(p))
    assert removed == [kept[1]] and said == []
    assert store.list_acls(zk, AclFilter(resource_type=T, name="orders", pattern=LIT)) == \
        [kept[0]]


def test_an_accepted_add_never_leaves_a_layout_the_brokers_refuse(cluster):
    _, zk = cluster
    store.add_acls(zk, [acl(f"t{i}", who=f"User:u{j}") for i in range(3) for j in range(3)],
                   max_bindings=10)  # nine bindings on three nodes
    with pytest.raises(ValueError, match=r"9 ACLs kept and 2 more .*acl.max.bindings \(10\)"):
        store.add_acls(zk, [acl("new"), acl("new", who="User:bob")], max_bindings=10)
    assert zk.exists("/kafka-acl/Topic/new") is None  # nothing of it written
    assert len(store.read_acls(zk, max_bindings=10)) == 9  # the brokers' read takes it
    assert store.add_acls(zk, [acl("new")], max_bindings=10) == [acl("new")]
    assert len(store.read_acls(zk, max_bindings=10)) == 10  # strict: at the bound, taken
    with pytest.raises(ValueError, match=r"10 ACLs kept and 1 more"):
        store.add_acls(zk, [acl("t0", who="User:bob")], max_bindings=10)
    assert store.add_acls(zk, [acl("t0", who="User:u0")], max_bindings=10) == []  # kept: no change
    assert len(store.read_acls(zk, max_bindings=10)) == 10
