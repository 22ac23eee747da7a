"""``hostbroker acls`` and ``hostbroker quotas`` run as a user runs them
(``python -m hostbroker ...``) against a real broker: what they print, what
the broker then holds, and their refusals: a bad argument is one line and
status 2 before anything is sent, a broker's refusal one line and status 1.

ACLs and quotas are broker-wide: the tests that list the whole set of ACLs or
of quotas (or set the default quota) and the one with its own acl.max.bindings
keep their own broker; the others share one module broker (``served``), on
topic names of their own."""

from __future__ import annotations

import json

import pytest

from tests.access_admin.support import described, entry
from tests.integration.cli import hostbroker, one_line_error
from tests.integration.wire_helpers import module_broker

# one broker for the tests that assert no broker-wide set (see the module docstring)
served = module_broker()

READ, DESCRIBE, WRITE = 3, 8, 4
UNREACHABLE = "tcp://127.0.0.1:1"


def ok(*args) -> str:
    done = hostbroker(*args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


# its own broker: it lists every ACL the broker holds
def test_acls_add_list_remove(broker):
    out = ok("acls", "add", "--bootstrap", broker.unix, "--allow-principal", "User:alice",
             "--allow-principal", "User:bob", "--operation", "Read", "--operation", "Describe",
             "--topic", "orders")
    assert out.splitlines() == [
        "added: Allow User:alice from * Read Topic:orders (literal)",
        "added: Allow User:alice from * Describe Topic:orders (literal)",
        "added: Allow User:bob from * Read Topic:orders (literal)",
        "added: Allow User:bob from * Describe Topic:orders (literal)"]
    ok("acls", "add", "--bootstrap", broker.tcp, "--deny-principal", "User:eve",
       "--deny-host", "127.0.0.1", "--operation", "Write", "--topic", "ord",
       "--resource-pattern-type", "prefixed")
    ok("acls", "add", "--bootstrap", broker.tcp, "--allow-principal", "User:ops",
       "--operation", "Alter", "--cluster")
    ok("acls", "add", "--bootstrap", broker.tcp, "--allow-principal", "User:c",
       "--operation", "Read", "--group", "readers")
    listed = ok("acls", "list", "--bootstrap", broker.tcp).splitlines()
    assert len(listed) == 7 and "Allow User:ops from * Alter Cluster:kafka-cluster (literal)" \
        in listed
    match = json.loads(ok("acls", "list", "--bootstrap", broker.unix, "--topic", "orders",
                          "--resource-pattern-type", "match", "--json"))["acls"]
    assert {(a["name"], a["principal"]) for a in match} == {
        ("ord", "User:eve"), ("orders", "User:alice"), ("orders", "User:bob")}
    literal = ok("acls", "list", "--bootstrap", broker.unix, "--topic", "ord",
                 "--resource-pattern-type", "literal")
    assert literal == ""
    prefixed = ok("acls", "list", "--bootstrap", broker.unix, "--topic", "ord",
                  "--resource-pattern-type", "prefixed")
    assert prefixed == "Deny User:eve from 127.0.0.1 Write Topic:ord (prefixed)\n"
    assert ok("acls", "list", "--bootstrap", broker.unix, "--principal", "User:bob") \
        .splitlines() == ["Allow User:bob from * Read Topic:orders (literal)",
                          "Allow User:bob from * Describe Topic:orders (literal)"]
    removed = ok("acls", "remove", "--bootstrap", broker.tcp, "--topic", "orders",
                 "--operation", "Describe")
    assert sorted(removed.splitlines()) == [
        "removed: Allow User:alice from * Describe Topic:orders (literal)",
        "removed: Allow User:bob from * Describe Topic:orders (literal)"]
    ok("acls", "remove", "--bootstrap", broker.tcp, "--topic", "orders",
       "--allow-principal", "User:alice", "--operation", "Read")
    with broker.client() as c:
        assert {(e.resource_name, e.principal) for e in described(c, resource_name="orders")} \
            == {("orders", "User:bob")}
    # without principals: every ACL of the resource
    ok("acls", "remove", "--bootstrap", broker.tcp, "--topic", "orders")
    with broker.client() as c:
        assert described(c, resource_name="orders") == set()
        assert entry("ord", "User:eve", pattern=4, host="127.0.0.1", op=WRITE, perm=2) in \
            described(c)


# its own broker: it sets the default quota and lists every quota the broker holds
def test_quotas_set_list_remove(broker):
    assert ok("quotas", "set", "--bootstrap", broker.unix, "--principal", "User:alice",
              "--producer-byte-rate", "1048576", "--request-rate", "100") == \
        "User:alice: producer_byte_rate=1048576, request_rate=100\n"
    ok("quotas", "set", "--bootstrap", broker.tcp, "--default", "--consumer-byte-rate", "4096")
    assert ok("quotas", "list", "--bootstrap", broker.tcp).splitlines() == [
        "<default> consumer_byte_rate=4096",
        "User:alice producer_byte_rate=1048576 request_rate=100"]
    ok("quotas", "remove", "--bootstrap", broker.tcp, "--principal", "User:alice",
       "--request-rate")
    assert json.loads(ok("quotas", "list", "--bootstrap", broker.tcp, "--principal",
                         "User:alice", "--json")) == {
        "quotas": [{"entity": "User:alice", "producer_byte_rate": 1048576}]}
    ok("quotas", "remove", "--bootstrap", broker.tcp, "--default")
    assert ok("quotas", "list", "--bootstrap", broker.tcp) == \
        "User:alice producer_byte_rate=1048576\n"


@pytest.mark.parametrize("args, says", [
    (["acls", "add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t"],
     "TYPE:NAME"),
    (["acls", "add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
     "Write on a Group"),
    (["acls", "add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
     "operation 'Fly'"),
    (["acls", "add", "--allow-principal", "User:a", "--topic", "t"], "give --operation"),
    (["acls", "add", "--allow-principal", "User:a", "--operation", "Read"], "--topic"),
    (["acls", "add", "--operation", "Read", "--topic", "t"], "--allow-principal"),
    (["acls", "add", "--allow-principal", "User:a", "--allow-host", "example.com",
      "--operation", "Read", "--topic", "t"], "IP address"),
    (["acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t",
      "--resource-pattern-type", "match"], "invalid choice"),
    (["acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "*",
      "--resource-pattern-type", "prefixed"], "prefix of '*'"),
    (["acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic",
      "x" * 300], "longer than 255"),
    (["acls", "remove", "--allow-principal", "User:a"], "--topic"),
    (["acls", "list", "--deny-host", "127.0.0.1"], "--deny-principal"),
    (["quotas", "set", "--principal", "User:a", "--request-rate", "0"], "1 or more"),
    (["quotas", "set", "--principal", "User:a", "--request-rate", "1e3"], "whole number"),
    (["quotas", "set", "--principal", "User:a", "--request-rate", str(2**60)], "whole number"),
    (["quotas", "set", "--principal", "User:a"], "--request-rate"),
    (["quotas", "set", "--request-rate", "5"], "--principal or --default"),
    (["quotas", "set", "--principal", "<default>", "--request-rate", "5"], "--default"),
    (["quotas", "remove", "--principal", "bob"], "TYPE:NAME"),
])
def test_bad_arguments_are_one_line_and_status_2(args, says):
    done = hostbroker(*args, "--bootstrap", UNREACHABLE)
    line = one_line_error(done)
    assert done.returncode == 2 and says in line, line


def test_a_bad_bootstrap_is_status_2():
    done = hostbroker("acls", "list", "--bootstrap", "http://x")
    assert done.returncode == 2 and "--bootstrap" in one_line_error(done)


# its own broker: acl.max.bindings=1
def test_a_broker_refusal_is_one_line_and_status_1(make_broker):
    broker = make_broker(acl_max_bindings=1)
    done = hostbroker("acls", "add", "--bootstrap", broker.unix, "--allow-principal",
                      "User:a", "--operation", "Read", "--operation", "Write", "--topic", "t")
    assert done.returncode == 1 and "acl.max.bindings (1)" in one_line_error(done)
    assert done.stdout == b""
    done = hostbroker("acls", "list", "--bootstrap", UNREACHABLE)
    assert done.returncode == 1 and "cannot reach the broker" in one_line_error(done)


def test_acls_remove_of_a_principal_removes_what_add_made_only(served):
    broker, t = served, "remove-only"  # a topic name no other test of the module uses
    ok("acls", "add", "--bootstrap", broker.unix, "--allow-principal", "User:a",
       "--operation", "Read", "--topic", t)
    ok("acls", "add", "--bootstrap", broker.unix, "--allow-principal", "User:a",
       "--allow-host", "10.0.0.5", "--operation", "Read", "--topic", t)
    removed = ok("acls", "remove", "--bootstrap", broker.unix, "--allow-principal", "User:a",
                 "--operation", "Read", "--topic", t)
    assert removed == f"removed: Allow User:a from * Read Topic:{t} (literal)\n"
    assert ok("acls", "list", "--bootstrap", broker.unix, "--topic", t) == \
        f"Allow User:a from 10.0.0.5 Read Topic:{t} (literal)\n"


def test_quotas_of_a_group_are_refused(served):
    broker = served
    done = hostbroker("quotas", "set", "--bootstrap", broker.unix, "--principal", "Group:ops",
                      "--request-rate", "5")
    assert done.returncode == 2 and "User" in one_line_error(done)


@pytest.mark.parametrize("args", [
    ("acls", "list"), ("quotas", "list"),
    ("acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t")])
def test_the_commands_need_a_bootstrap_said(args):
    done = hostbroker(*args)
    assert done.returncode == 2 and "give --bootstrap: unix://" in one_line_error(done)
