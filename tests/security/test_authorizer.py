"""The authorizer's rule, case by case and against a plain reading of it over
random ACL sets (hypothesis)."""

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from hostbroker.security.acl import (IMPLIES, AclBinding, Operation, PatternType, Permission,
                                     ResourceType, OPERATIONS)
from hostbroker.security.authorizer import Authorizer, parse_super_users
from hostbroker.security.principals import Identity, Principal

ALICE = Identity(Principal("User", "alice"), (Principal("Group", "ops"),), "127.0.0.1")
BOB = Identity(Principal("User", "bob"), (), "localhost")
T, G = ResourceType.TOPIC, ResourceType.GROUP


def bind(name, op, perm=Permission.ALLOW, principal="User:alice", host="*",
         pattern=PatternType.LITERAL, rtype=T):
    return AclBinding.checked(rtype, name, pattern, Principal.parse(principal), host, op, perm)


def test_without_acls_the_setting_decides():
    assert not Authorizer([]).authorize(ALICE, Operation.READ, T, "orders")
    assert Authorizer([], allow_if_no_acl=True).authorize(ALICE, Operation.READ, T, "orders")
    # an ACL on the resource for someone else: no longer "no ACL found"
    only_bob = Authorizer([bind("orders", Operation.READ, principal="User:bob")],
                          allow_if_no_acl=True)
    assert not only_bob.authorize(ALICE, Operation.READ, T, "orders")
    assert only_bob.authorize(ALICE, Operation.READ, T, "other")


def test_allow_deny_implication_groups_hosts_and_patterns():
    a = Authorizer([
        bind("orders", Operation.READ),
        bind("orders", Operation.WRITE, Permission.DENY, principal="User:*"),
        bind("pay", Operation.WRITE, pattern=PatternType.PREFIXED, principal="Group:ops"),
        bind("*", Operation.DESCRIBE, principal="User:bob", host="localhost"),
        bind("payroll", Operation.ALL, Permission.DENY, host="127.0.0.1"),
    ])
    assert a.authorize(ALICE, Operation.READ, T, "orders")
    assert a.authorize(ALICE, Operation.DESCRIBE, T, "orders")  # implied by Read
    assert not a.authorize(ALICE, Operation.WRITE, T, "orders")  # denied to everyone
    assert not a.authorize(ALICE, Operation.DELETE, T, "orders")
    assert a.authorize(ALICE, Operation.WRITE, T, "payments")  # by her group, by prefix
    assert not a.authorize(ALICE, Operation.WRITE, T, "payroll")  # DENY All from her host
    assert not a.authorize(ALICE, Operation.WRITE, T, "pa")  # shorter than the prefix
    assert a.authorize(BOB, Operation.DESCRIBE, T, "anything")
    assert not a.authorize(BOB, Operation.READ, T, "anything")
    bob_tcp = Identity(BOB.principal, (), "10.0.0.9")
    assert not a.authorize(bob_tcp, Operation.DESCRIBE, T, "anything")  # host differs
    assert not a.authorize(ALICE, Operation.READ, G, "orders")  # types do not mix


def test_super_users_by_principal_or_group():
    supers = parse_super_users(" User:root ; Group:ops;;")
    assert supers == {Principal("User", "root"), Principal("Group", "ops")}
    a = Authorizer([bind("orders", Operation.ALL, Permission.DENY)], super_users=supers)
    assert a.authorize(ALICE, Operation.WRITE, T, "orders")
    assert not a.authorize(BOB, Operation.WRITE, T, "orders")


def test_the_decision_cache_is_bounded_and_gives_the_same_answers():
    a = Authorizer([bind("t1", Operation.READ)], cache_entries=4)
    for _ in range(3):
        for i in range(10):
            assert a.authorize(ALICE, Operation.READ, T, f"t{i}") is (i == 1)
        assert len(a._cache) <= 4


# -- against a plain reading of the rule --------------------------------------------------

NAMES = ["a", "ab", "abc", "b", "*"]
PEOPLE = [ALICE, BOB, Identity(Principal("User", "carol"), (Principal("Group", "ops"),), "::1")]


def reference(bindings, identity, op, rtype, name, allow_if_no_acl):
    applying = [b for b in bindings if b.resource_type is rtype and (
        (b.pattern is PatternType.LITERAL and b.name in (name, "*"))
        or (b.pattern is PatternType.PREFIXED and name.startswith(b.name)))]
    if not applying:
        return allow_if_no_acl
    mine = [b for b in applying
            if (b.principal in identity.principals() or str(b.principal) == "User:*")
            and b.host in ("*", identity.host)]
    if any(b.permission is Permission.DENY and b.operation in (op, Operation.ALL) for b in mine):
        return False
    return any(b.permission is Permission.ALLOW
               and (b.operation is Operation.ALL or b.operation is op
                    or b.operation in IMPLIES.get(op, ())) for b in mine)


@st.composite
def bindings(draw):
    rtype = draw(st.sampled_from([T, G]))
    pattern = draw(st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]))
    name = draw(st.sampled_from(NAMES if pattern is PatternType.LITERAL else NAMES[:-1]))
    op = draw(st.sampled_from(sorted(OPERATIONS[rtype]) + [Operation.ALL]))
    return AclBinding.checked(rtype, name, pattern,
                              Principal.parse(draw(st.sampled_from(
                                  ["User:alice", "User:bob", "User:*", "Group:ops"]))),
                              draw(st.sampled_from(["*", "127.0.0.1", "localhost"])),
                              op, draw(st.sampled_from([Permission.ALLOW, Permission.DENY])))


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings(), max_size=12), st.booleans())
def test_decisions_agree_with_the_plain_reading(acls, allow_if_no_acl):
    a = Authorizer(acls, allow_if_no_acl=allow_if_no_acl)
    for identity in PEOPLE:
        for rtype in (T, G):
            for op in sorted(OPERATIONS[rtype]):
                for name in NAMES[:-1] + ["abcd", "z"]:
                    assert a.authorize(identity, op, rtype, name) == reference(
                        acls, identity, op, rtype, name, allow_if_no_acl), (identity, op, name)


def test_a_decision_reads_only_the_identitys_bindings():
    """100,000 bindings of other principals on one prefix and on ``*``: a
    decision for a fresh name still costs a few dict reads (it once scanned
    every binding of the name's resources)."""
    teams = [AclBinding(ResourceType.TOPIC, prefix, PatternType.PREFIXED if prefix != "*"
                        else PatternType.LITERAL, Principal("User", f"u{i}"), "*",
                        Operation.WRITE, Permission.ALLOW)
             for i in range(50_000) for prefix in ("team-", "*")]
    mine = AclBinding(ResourceType.TOPIC, "team-", PatternType.PREFIXED,
                      Principal("User", "ANONYMOUS"), "*", Operation.DESCRIBE, Permission.ALLOW)
    authorizer = Authorizer([*teams, mine])
    who = Identity(Principal("User", "ANONYMOUS"), (Principal("Group", "g1"),), "127.0.0.1")
    timings = []
    for n in range(300):
        started = time.perf_counter_ns()
        assert authorizer.authorize(who, Operation.DESCRIBE, ResourceType.TOPIC, f"team-{n}")
        timings.append(time.perf_counter_ns() - started)
    assert not authorizer.authorize(who, Operation.WRITE, ResourceType.TOPIC, "team-x")
    assert sorted(timings)[len(timings) // 2] < 50_000  # ns: the median, uncached decisions
