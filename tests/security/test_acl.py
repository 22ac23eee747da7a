"""ACL bindings: what is refused when one is made, the JSON form, and filters."""

import socket

import pytest

from hostbroker.security.acl import (CLUSTER_NAME, AclBinding, AclFilter, Operation,
                                     PatternType, Permission, ResourceType, binding_from_json,
                                     binding_to_json, normal_host, operation_named)
from hostbroker.security.authorizer import Authorizer
from hostbroker.security.principals import Principal
from hostbroker.workers.peers import peer_identity

ALICE = Principal("User", "alice")


def bind(rtype=ResourceType.TOPIC, name="orders", pattern=PatternType.LITERAL, principal=ALICE,
         host="*", op=Operation.READ, perm=Permission.ALLOW):
    if isinstance(principal, str):
        principal = Principal.parse(principal)
    return AclBinding.checked(rtype, name, pattern, principal, host, op, perm)


@pytest.mark.parametrize("kwargs, says", [
    ({"rtype": ResourceType.GROUP, "op": Operation.WRITE}, "operation Write on a Group"),
    ({"rtype": ResourceType.CLUSTER, "name": "c", "op": Operation.DESCRIBE}, "Cluster resource"),
    ({"rtype": ResourceType.CLUSTER, "name": CLUSTER_NAME, "op": Operation.READ}, "operation"),
    ({"name": "*", "pattern": PatternType.PREFIXED}, "prefix"),
    ({"name": ""}, "empty"),
    ({"name": "a" * 256}, "longer than"),
    ({"host": "example.com"}, "host"),
    ({"host": "fe80::1%" + "a" * 100_000}, "longer than 64"),
    ({"host": "fe80::1%\x1b[31mred\n\x00x"}, "scope id"),
    ({"host": "fe80::1%lo"}, "scope id"),
    ({"name": "ab\u202ecd"}, "control character"),
    ({"name": "ab\x9bcd"}, "control character"),
    ({"principal": "User:x\u2066y"}, "control character"),
    ({"pattern": PatternType.ANY}, "pattern type"),
    ({"perm": Permission.ANY}, "permission type"),
    ({"op": Operation.ANY}, "operation"),
])
def test_a_binding_that_cannot_be_is_refused_naming_the_field(kwargs, says):
    with pytest.raises(ValueError, match=says):
        bind(**kwargs)


def test_hosts_are_kept_in_one_form():
    assert bind(host="::0001").host == "::1"
    assert bind(host="localhost").host == "localhost"
    assert bind(host="::ffff:10.0.0.5").host == "10.0.0.5"
    assert bind(host="0:0:0:0:0:ffff:a00:5").host == "10.0.0.5"


@pytest.mark.parametrize("typed, peer", [
    ("::ffff:127.0.0.1", "::ffff:127.0.0.1"), ("::ffff:7f00:1", "::ffff:127.0.0.1"),
    ("127.0.0.1", "::ffff:127.0.0.1"), ("2001:db8::1", "2001:db8:0:0:0:0:0:1"),
    ("2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1%eth0"), ("10.0.0.5", "10.0.0.5"),
])
def test_an_acl_host_and_a_connection_host_have_one_form(typed, peer):
    assert normal_host(typed) == normal_host(peer, peer=True)


def test_a_deny_on_an_ipv4_mapped_address_refuses_the_connection_it_names():
    # an IPv6 listener taking IPv4: the kernel gives ::ffff:127.0.0.1 for the client
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::ffff:127.0.0.1", 0))
        listener.listen(1)
    except OSError:
        listener.close()
        pytest.skip("no dual-stack IPv6 here")
    with listener, socket.create_connection(("127.0.0.1", listener.getsockname()[1])):
        accepted, address = listener.accept()
        with accepted:
            assert address[0] == "::ffff:127.0.0.1"
            identity = peer_identity(accepted)
    allow = bind(principal="User:*", host="*")
    deny = bind(principal="User:*", host="::ffff:127.0.0.1", perm=Permission.DENY)
    assert Authorizer([allow]).authorize(identity, Operation.READ, ResourceType.TOPIC, "orders")
    assert not Authorizer([allow, deny]).authorize(identity, Operation.READ,
                                                   ResourceType.TOPIC, "orders")


def test_the_json_form_goes_and_comes_back():
    b = bind(rtype=ResourceType.CLUSTER, name=CLUSTER_NAME, op=Operation.CLUSTER_ACTION,
             perm=Permission.DENY, host="10.0.0.1")
    doc = binding_to_json(b)
    assert doc["operation"] == "ClusterAction" and doc["permissionType"] == "Deny"
    assert binding_from_json(doc) == b
    for field in doc:
        broken = dict(doc)
        broken[field] = 7
        with pytest.raises(ValueError, match=field):
            binding_from_json(broken)
    with pytest.raises(ValueError, match="unknown field"):
        binding_from_json({**doc, "extra": "x"})
    assert operation_named("cluster_action") is Operation.CLUSTER_ACTION


def test_filters_select_by_each_field_and_match_by_resource():
    literal = bind()
    star = bind(name="*")
    prefixed = bind(name="ord", pattern=PatternType.PREFIXED)
    other = bind(name="payments", principal=Principal("User", "bob"), op=Operation.WRITE)
    every = [literal, star, prefixed, other]
    assert [b for b in every if AclFilter().matches(b)] == every
    match = AclFilter(ResourceType.TOPIC, "orders", PatternType.MATCH)
    assert [b for b in every if match.matches(b)] == [literal, star, prefixed]
    assert [b for b in every if AclFilter(name="ord", pattern=PatternType.PREFIXED)
            .matches(b)] == [prefixed]
    assert [b for b in every if AclFilter(principal=Principal("User", "bob")).matches(b)] \
        == [other]
    assert [b for b in every if AclFilter(operation=Operation.WRITE).matches(b)] == [other]
    assert not AclFilter(resource_type=ResourceType.GROUP).matches(literal)
