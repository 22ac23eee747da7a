"""ACL bindings: what is refused when one is made, the JSON form, and filters."""

import pytest

from hostbroker.security.acl import (CLUSTER_NAME, AclBinding, AclFilter, Operation,
                                     PatternType, Permission, ResourceType, binding_from_json,
                                     binding_to_json, operation_named)
from hostbroker.security.principals import Principal

ALICE = Principal("User", "alice")


def bind(rtype=ResourceType.TOPIC, name="orders", pattern=PatternType.LITERAL, principal=ALICE,
         host="*", op=Operation.READ, perm=Permission.ALLOW):
    return AclBinding.checked(rtype, name, pattern, principal, host, op, perm)


@pytest.mark.parametrize("kwargs, says", [
    ({"rtype": ResourceType.GROUP, "op": Operation.WRITE}, "operation Write on a Group"),
    ({"rtype": ResourceType.CLUSTER, "name": "c", "op": Operation.DESCRIBE}, "Cluster resource"),
    ({"rtype": ResourceType.CLUSTER, "name": CLUSTER_NAME, "op": Operation.READ}, "operation"),
    ({"name": "*", "pattern": PatternType.PREFIXED}, "prefix"),
    ({"name": ""}, "empty"),
    ({"name": "a" * 256}, "longer than"),
    ({"host": "example.com"}, "host"),
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
