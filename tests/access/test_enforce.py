"""ACLs enforced by a real broker (``authorizer.enable=true``, an ``acls.json``)
on clients that are distinct local users over the Unix socket, and anonymous
over TCP: every resource type, allowed and denied, at the handler and at the
processor's own routes (METADATA and OFFSETS answered there, direct FETCHes,
lone PRODUCE PUTs, GROUP_PUTs; the second broker turns them off, so the same
requests take the handler's way)."""

from __future__ import annotations

import time

import pytest

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from tests.access.conftest import AccessBroker, run_as, whoami_as

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
OK, TOPIC_NO, GROUP_NO = "NONE", "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"
CLUSTER_NO = "frame:CLUSTER_AUTHORIZATION_FAILED"


def acl(rtype, name, principal, operation, permission=ALLOW, pattern=LIT, host="*"):
    return AclBinding.checked(rtype, name, pattern, Principal.parse(principal), host,
                              operation, permission)


BINDINGS = [
    acl(T, "orders", "User:hbalice", Operation.WRITE),
    acl(T, "orders", "User:hbalice", Operation.READ),
    acl(T, "orders", "User:hbalice", Operation.ALTER),
    acl(T, "orders-", "Group:hbteam", Operation.READ, pattern=PRE),
    acl(T, "orders-eu", "User:hbcarol", Operation.READ, DENY),  # DENY beats the group's ALLOW
    acl(T, "secret", "User:*", Operation.READ),
    acl(T, "secret", "User:hbbob", Operation.READ, DENY),
    acl(T, "trash", "User:hbalice", Operation.DELETE),
    acl(T, "new-", "User:hbalice", Operation.CREATE, pattern=PRE),
    acl(T, "new-", "User:hbalice", Operation.WRITE, pattern=PRE),
    acl(T, "hosty", "User:ANONYMOUS", Operation.WRITE, host="127.0.0.1"),
    acl(T, "hosty", "User:ANONYMOUS", Operation.READ, host="10.9.9.9"),
    acl(G, "g-alice", "User:hbalice", Operation.READ),
    acl(C, "kafka-cluster", "User:hbcarol", Operation.CLUSTER_ACTION),
    acl(C, "kafka-cluster", "User:hbcarol", Operation.ALTER),
]
TOPICS = ("orders", "orders-eu", "secret", "trash", "open", "hosty")
DIRECT = {"processor.local.requests": "true", "processor.direct.produce": "true",
          "processor.local.fetch": "true", "processor.direct.groups": "true"}
VIA_HANDLER = {k: "false" for k in DIRECT}


@pytest.fixture(scope="module", params=["direct", "handler"])
def acl_broker(request, users, tmp_path_factory):
    routes = DIRECT if request.param == "direct" else VIA_HANDLER
    b = AccessBroker(tmp_path_factory.mktemp("acl"), BINDINGS, super_users="User:hbsuper",
                     **{k.replace(".", "_"): v for k, v in routes.items()})
    b.route = request.param
    b.start()
    try:
        # the broker's own user over the Unix socket may do everything
        assert run_as(None, b.unix, [{"op": "create", "topic": t} for t in TOPICS]) == \
            [OK] * len(TOPICS)
        assert run_as(None, b.unix, [{"op": "produce", "topic": t} for t in TOPICS]) == \
            [[OK]] * len(TOPICS)
        yield b
    finally:
        b.finish()


def test_whoami_tells_each_kind_of_peer(acl_broker):
    alice, tcp = run_as("hbalice", acl_broker.unix, [{"op": "whoami"}])[0], \
        run_as("hbalice", acl_broker.tcp, [{"op": "whoami"}])[0]
    assert alice[0] == "User:hbalice"
    assert {"Group:hbteam", "Group:hbclients", "Group:hbalice"} == set(alice[1])
    assert alice[2:] == ["localhost", 1]
    assert tcp == ["User:ANONYMOUS", [], "127.0.0.1", 1]
    done = whoami_as("hbbob", acl_broker.unix)
    assert done.returncode == 0, done.stderr
    assert '"principal": "User:hbbob"' in done.stdout and '"authorizer": true' in done.stdout


def _handler_requests(broker) -> int:
    time.sleep(1.0)  # the heartbeat threads publish the counters every ~0.4 s
    return broker.broker.counter("handler", "requests")


def test_allowed_requests_take_the_processor_s_routes(acl_broker):
    """Allowed, a lone PRODUCE, a FETCH and a METADATA never reach a handler
    on the direct broker (a processor that sent everything to its handler
    would pass every other test); on the other broker all three do."""
    before = _handler_requests(acl_broker)
    assert run_as("hbalice", acl_broker.unix, [
        {"op": "produce", "topic": "orders"}, {"op": "fetch", "topic": "orders"},
        {"op": "metadata", "topics": ["orders"]}]) == [[OK], [OK], {"orders": OK}]
    taken = _handler_requests(acl_broker) - before
    assert taken == (0 if acl_broker.route == "direct" else 3), taken


def test_produce_allowed_and_denied_per_partition(acl_broker):
    u = acl_broker.unix
    assert run_as("hbalice", u, [{"op": "produce", "topic": "orders"},
                                 {"op": "produce", "parts": [["orders", 0], ["open", 0]]}]) == \
        [[OK], [OK, TOPIC_NO]]
    assert run_as("hbbob", u, [{"op": "produce", "topic": "orders"},
                               {"op": "produce", "topic": "orders", "acks": -1}]) == \
        [[TOPIC_NO], [TOPIC_NO]]


def test_fetch_allowed_and_denied_on_both_routes(acl_broker):
    u = acl_broker.unix
    assert run_as("hbalice", u, [{"op": "fetch", "topic": "orders"},
                                 {"op": "fetch", "parts": [["orders", 0], ["open", 0]]},
                                 {"op": "fetch", "topic": "secret"}]) == \
        [[OK], [OK, TOPIC_NO], [OK]]
    # DENY beats ALLOW (User:* may read secret, hbbob may not)
    assert run_as("hbbob", u, [{"op": "fetch", "topic": "orders"},
                               {"op": "fetch", "topic": "secret"}]) == [[TOPIC_NO], [TOPIC_NO]]


def test_prefixed_patterns_group_principals_and_deny(acl_broker):
    u = acl_broker.unix
    # Group:hbteam may READ orders-*: alice by her group; carol denied by name
    assert run_as("hbalice", u, [{"op": "fetch", "topic": "orders-eu"}]) == [[OK]]
    assert run_as("hbcarol", u, [{"op": "fetch", "topic": "orders-eu"}]) == [[TOPIC_NO]]
    assert run_as("hbbob", u, [{"op": "fetch", "topic": "orders-eu"}]) == [[TOPIC_NO]]


def test_offsets_and_metadata_are_filtered(acl_broker):
    u = acl_broker.unix
    alice = run_as("hbalice", u, [{"op": "offsets", "topic": "orders"},
                                  {"op": "metadata"},
                                  {"op": "metadata", "topics": ["orders", "open", "nothere"]}])
    assert alice[0] == OK
    assert set(alice[1]) == {"orders", "orders-eu", "secret", "trash"}  # DESCRIBE by implication
    assert alice[2] == {"orders": OK, "open": TOPIC_NO, "nothere": TOPIC_NO}
    bob = run_as("hbbob", u, [{"op": "offsets", "topic": "orders"}, {"op": "metadata"}])
    assert bob == [TOPIC_NO, {"secret": OK}]  # User:* reads it, and READ describes
    assert run_as("hbbob", u, [{"op": "configs"}]) == [["secret"]]


def test_create_delete_alter_topics(acl_broker):
    u = acl_broker.unix
    assert run_as("hbbob", u, [{"op": "create", "topic": "new-bob"},
                               {"op": "delete", "topic": "trash"},
                               {"op": "alter", "topic": "orders"},
                               {"op": "produce", "topic": "new-auto-bob"}]) == \
        ["frame:TOPIC_AUTHORIZATION_FAILED", "frame:TOPIC_AUTHORIZATION_FAILED",
         "frame:TOPIC_AUTHORIZATION_FAILED", [TOPIC_NO]]
    assert run_as("hbalice", u, [{"op": "create", "topic": "new-x"},
                                 {"op": "create", "topic": "other-x"},
                                 {"op": "alter", "topic": "orders"},
                                 {"op": "produce", "topic": "new-auto"}]) == \
        [OK, "frame:TOPIC_AUTHORIZATION_FAILED", OK, [OK]]
    assert run_as("hbalice", u, [{"op": "delete", "topic": "trash"}]) == [OK]


def test_group_requests(acl_broker):
    u = acl_broker.unix
    alice = run_as("hbalice", u, [
        {"op": "commit", "group": "g-alice", "parts": [["orders", 0], ["open", 0]]},
        {"op": "commit", "group": "g-alice", "parts": [["orders", 0]]},
        {"op": "offset_fetch", "group": "g-alice", "parts": [["orders", 0]]},
        {"op": "join", "group": "g-alice", "topic": "orders"},
        {"op": "heartbeat", "group": "g-alice"},
        {"op": "list_groups"},
        {"op": "offset_groups"}])
    assert alice[0] == [OK, TOPIC_NO]
    assert alice[1:3] == [[OK], [OK]]
    assert alice[3] == OK
    assert alice[4] not in (GROUP_NO, "frame:GROUP_AUTHORIZATION_FAILED")
    assert alice[5] == [OK, ["g-alice"]] and alice[6] == [OK, ["g-alice"]]
    bob = run_as("hbbob", u, [
        {"op": "commit", "group": "g-alice", "parts": [["orders", 0]]},
        {"op": "offset_fetch", "group": "g-alice", "parts": [["orders", 0]]},
        {"op": "join", "group": "g-alice", "topic": "orders"},
        {"op": "heartbeat", "group": "g-alice"},
        {"op": "list_groups"},
        {"op": "offset_groups"}])
    assert bob == [[GROUP_NO], [GROUP_NO], GROUP_NO, GROUP_NO, [OK, []], [OK, []]]
    # the broker's own user sees every group
    assert "g-alice" in run_as(None, u, [{"op": "offset_groups"}])[0][1]


def test_cluster_requests(acl_broker):
    u = acl_broker.unix
    bob = run_as("hbbob", u, [{"op": "follower_fetch", "topic": "orders"},
                              {"op": "leader_and_isr"}, {"op": "log_dir_admin"}])
    assert bob == [CLUSTER_NO] * 3
    carol = run_as("hbcarol", u, [{"op": "follower_fetch", "topic": "orders"},
                                  {"op": "leader_and_isr"}, {"op": "log_dir_admin"}])
    # allowed, so each reaches its route and gets that route's answer: a
    # standalone broker leads no replicated partition, its controller's
    # (empty) LEADER_AND_ISR is taken, and dir 99 is no log dir of it
    assert carol == [["NOT_LEADER_FOR_PARTITION"], OK, "INVALID_REQUEST"], carol


def test_super_users_and_the_broker_s_own_user(acl_broker):
    for user in ("hbsuper", None):
        assert run_as(user, acl_broker.unix, [{"op": "produce", "topic": "open"},
                                              {"op": "fetch", "topic": "open"},
                                              {"op": "leader_and_isr"}]) == [[OK], [OK], OK]
    # the broker's own user over TCP is nobody in particular: User:ANONYMOUS
    assert run_as(None, acl_broker.tcp, [{"op": "produce", "topic": "open"}]) == [[TOPIC_NO]]


def test_host_patterns_over_tcp(acl_broker):
    assert run_as("hbbob", acl_broker.tcp, [{"op": "produce", "topic": "hosty"},
                                            {"op": "fetch", "topic": "hosty"},
                                            {"op": "produce", "topic": "orders"}]) == \
        [[OK], [TOPIC_NO], [TOPIC_NO]]


@pytest.fixture
def open_broker(users, tmp_path):
    b = AccessBroker(tmp_path, [acl(T, "orders", "User:hbalice", Operation.WRITE)],
                     allow_everyone_if_no_acl_found="true")
    b.start()
    try:
        yield b
    finally:
        b.finish()


def test_allow_everyone_if_no_acl_found_and_a_restart_reads_the_acls(open_broker):
    u = open_broker.unix
    assert run_as(None, u, [{"op": "create", "topic": "free"},
                            {"op": "create", "topic": "orders"}]) == [OK, OK]
    # no ACL names "free": everyone; "orders" has one: only alice
    assert run_as("hbbob", u, [{"op": "produce", "topic": "free"},
                               {"op": "produce", "topic": "orders"}]) == [[OK], [TOPIC_NO]]
    open_broker.restart([acl(T, "orders", "User:hbbob", Operation.WRITE)],
                        allow_everyone_if_no_acl_found="false")
    assert run_as("hbbob", u, [{"op": "produce", "topic": "free"},
                               {"op": "produce", "topic": "orders"}]) == [[TOPIC_NO], [OK]]


def test_authorizer_off_allows_everyone(users, tmp_path):
    b = AccessBroker(tmp_path, [acl(T, "orders", "User:hbalice", Operation.WRITE)],
                     authorizer_enable="false")
    b.start()
    try:
        produced, (principal, groups, host, on) = run_as(
            "hbbob", b.unix, [{"op": "produce", "topic": "orders"}, {"op": "whoami"}])
        assert produced == [OK]
        assert (principal, set(groups), host, on) == (
            "User:hbbob", {"Group:hbbob", "Group:hbclients"}, "localhost", 0)
    finally:
        b.finish()
