"""CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, ALTER_QUOTAS and DESCRIBE_QUOTAS
against a real ``hostbroker serve``, over TCP and the Unix socket: what each
answers, per entry, and what the broker then holds (its file and the document
every process reads).

ACLs and quotas are broker-wide, so every test that creates or alters them keeps its
own broker; the tests whose requests are all refused share one module broker
(``served``) and compare what the broker holds with a reading taken at their start."""

from __future__ import annotations

import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls as w
from tests.access_admin.support import (
    ALL, ANY, CLUSTER, CREATE, DENY, GROUP, LITERAL, MATCH, PREFIXED, TOPIC, WRITE, alter, create, delete, described, entry, file_acls, published_now, quotas_of)
from tests.integration.wire_helpers import module_broker

OK = (ErrorCode.NONE, None)

# Shared by the tests whose requests change nothing the broker holds.
served = module_broker()


@pytest.fixture(params=["tcp", "unix"])
def client(request, broker):
    """A client of the test's own broker: the test creates or alters ACLs or quotas."""
    with broker.client(getattr(broker, request.param)) as c:
        yield c


@pytest.fixture(params=["tcp", "unix"])
def shared_client(request, served):
    """A client of the module broker: the test's requests are refused and change nothing."""
    with served.client(getattr(served, request.param)) as c:
        yield c


def test_created_acls_are_described_kept_and_published(broker, client):
    before, _, _ = published_now(broker)
    a = entry("orders", "User:alice")
    b = entry("ord", "User:bob", pattern=PREFIXED, op=WRITE, host="127.0.0.1")
    assert create(client, a, b) == [OK, OK]
    assert described(client) == {a, b}
    assert [e["principal"] for e in file_acls(broker)] == ["User:bob", "User:alice"]
    generation, bindings, _ = published_now(broker)
    assert generation > before
    assert sorted(str(x.principal) for x in bindings) == ["User:alice", "User:bob"]
    # a binding held already is NONE again, and nothing is published for it
    assert create(client, a) == [OK]
    assert published_now(broker)[0] == generation
    assert len(file_acls(broker)) == 2


def test_filters_literal_prefixed_any_and_match(client):
    lit = entry("orders", "User:a")
    pre = entry("ord", "User:b", pattern=PREFIXED)
    star = entry("*", "User:c")
    other = entry("payments", "User:d")
    group = entry("orders", "User:e", rtype=GROUP)
    cluster = entry("kafka-cluster", "User:f", rtype=CLUSTER, op=CREATE)
    assert create(client, lit, pre, star, other, group, cluster) == [OK] * 6
    assert described(client) == {lit, pre, star, other, group, cluster}
    assert described(client, resource_type=TOPIC, resource_name="orders",
                     pattern_type=LITERAL) == {lit}
    assert described(client, resource_name="orders", pattern_type=ANY) == {lit, group}
    assert described(client, resource_type=TOPIC, resource_name="ord",
                     pattern_type=PREFIXED) == {pre}
    assert described(client, resource_type=TOPIC, resource_name="orders",
                     pattern_type=MATCH) == {lit, pre, star}
    assert described(client, resource_type=TOPIC, resource_name="ordinal",
                     pattern_type=MATCH) == {pre, star}
    assert described(client, principal="User:d") == {other}
    assert described(client, operation=CREATE) == {cluster}
    assert described(client, resource_type=GROUP) == {group}
    assert described(client, permission_type=DENY) == set()


def test_delete_answers_per_filter_what_it_removed(broker, client):
    a, b, c = entry("t1", "User:a"), entry("t2", "User:a"), entry("t2", "User:b", op=WRITE)
    assert create(client, a, b, c) == [OK] * 3
    answer = delete(client, w.AclFilterEntry(resource_name="t2", principal="User:a"),
                    w.AclFilterEntry(operation=WRITE),
                    w.AclFilterEntry(principal="nobody"),
                    w.AclFilterEntry(resource_name="absent"))
    first, second, bad, none = answer.results
    assert (first.error_code, first.deleted) == (ErrorCode.NONE, (b,))
    assert (second.error_code, second.deleted) == (ErrorCode.NONE, (c,))
    assert bad.error_code == ErrorCode.INVALID_REQUEST and "TYPE:NAME" in bad.error_message
    assert (none.error_code, none.deleted) == (ErrorCode.NONE, ())
    assert described(client) == {a}
    assert [e["name"] for e in file_acls(broker)] == ["t1"]
    _, bindings, _ = published_now(broker)
    assert [x.name for x in bindings] == ["t1"]


BAD_CREATIONS = [
    (entry(principal="alice"), "expected TYPE:NAME"),
    (entry(principal="User:"), "name is empty"),
    (entry(principal="Us er:x"), "letters only"),
    (entry(principal="User:" + "x" * 300), "longer than 255"),
    (entry(host="example.com"), "IP address"),
    (entry(rtype=GROUP, op=WRITE), "Write on a Group"),
    (entry("*", pattern=PREFIXED), "prefix of '*'"),
    (entry("other", rtype=CLUSTER, op=CREATE), "kafka-cluster"),
    (entry("x" * 256), "longer than 255"),
    (entry("a\nb"), "control character"),
    (entry(""), "empty"),
]


def test_each_bad_creation_is_refused_in_its_place(client):
    good = entry("kept", "User:kept")
    results = create(client, *[bad for bad, _ in BAD_CREATIONS], good)
    for (code, message), (_, says) in zip(results, BAD_CREATIONS):
        assert code == ErrorCode.INVALID_REQUEST and says in message, message
    assert results[-1] == OK
    assert described(client) == {good}


def test_bad_enums_and_huge_strings_close_the_connection(served):
    broker = served
    with broker.client(broker.unix) as c:
        acls_before = described(c)
    for bad in (entry(op=1), entry(perm=1), entry(pattern=MATCH), entry(rtype=9),
                entry(op=ALL + 20)):
        with broker.client(broker.tcp) as c:
            with pytest.raises(BrokerError) as caught:
                create(c, bad)
            assert caught.value.code == ErrorCode.INVALID_REQUEST
    with broker.client(broker.unix) as c:
        # a name of 30,000 bytes decodes, and is refused in its place
        (code, message), = create(c, entry("n" * 30_000))
        assert code == ErrorCode.INVALID_REQUEST and "longer than 255" in message
        assert described(c) == acls_before


def test_many_filters_in_one_request_cost_a_bounded_answer(client):
    assert create(client, entry("t", "User:a")) == [OK]
    filters = tuple(w.AclFilterEntry(resource_name=f"absent-{i}") for i in range(5000))
    answer = delete(client, *filters)
    assert len(answer.results) == 5000
    assert all(r.error_code == ErrorCode.NONE and not r.deleted for r in answer.results)
    assert described(client) == {entry("t", "User:a")}


def test_quotas_set_described_removed(broker, client):
    assert alter(client, ("User:alice", {"producer_byte_rate": 1 << 20, "request_rate": 50}),
                 ("<default>", {"consumer_byte_rate": 4096})) == [OK, OK]
    assert quotas_of(client) == {
        "<default>": {"consumer_byte_rate": 4096},
        "User:alice": {"producer_byte_rate": 1 << 20, "request_rate": 50}}
    assert quotas_of(client, "User:alice", "User:nobody") == {
        "User:alice": {"producer_byte_rate": 1 << 20, "request_rate": 50}, "User:nobody": {}}
    _, _, quotas = published_now(broker)
    assert quotas.of("User:alice").request_rate == 50
    assert quotas.of("User:bob").consumer_byte_rate == 4096
    # removing a key; removing the last one drops the entity
    assert alter(client, ("User:alice", {"request_rate": w.REMOVE})) == [OK]
    assert alter(client, ("<default>", {"consumer_byte_rate": w.REMOVE})) == [OK]
    assert quotas_of(client) == {"User:alice": {"producer_byte_rate": 1 << 20}}
    assert published_now(broker)[2].of("User:bob").consumer_byte_rate is None


BAD_QUOTAS = [
    ("alice", {"request_rate": 1}, "TYPE:NAME"),
    ("User:a", {"byte_rate": 1}, "expected one of"),
    ("User:a", {"request_rate": 0}, "whole number"),
    ("User:a", {"request_rate": -5}, "whole number"),
    ("User:a", {"request_rate": 2**62}, "whole number"),
    ("User:a", {}, "no quota given"),
]


def test_each_bad_quota_is_refused_in_its_place(client):
    results = alter(client, *[(e, v) for e, v, _ in BAD_QUOTAS], ("User:ok", {"request_rate": 9}))
    for (code, message), (_, _, says) in zip(results, BAD_QUOTAS):
        assert code == ErrorCode.INVALID_REQUEST and says in message, message
    assert results[-1] == OK
    assert quotas_of(client) == {"User:ok": {"request_rate": 9}}


def test_a_key_named_twice_for_one_entity_is_refused(shared_client):
    client = shared_client
    quotas_before = quotas_of(client)
    answer = client.request(w.AlterQuotasRequest((w.QuotaEntity("User:a", (
        w.QuotaValue("request_rate", 1), w.QuotaValue("request_rate", 2))),)))
    (result,) = answer.results
    assert result.error_code == ErrorCode.INVALID_REQUEST and "twice" in result.error_message
    assert quotas_of(client) == quotas_before
    assert quotas_of(client, "User:a") == {"User:a": {}}


def test_a_bad_quota_entity_to_describe_is_invalid(shared_client):
    answer = shared_client.request(w.DescribeQuotasRequest(("not a principal",)))
    assert answer.error_code == ErrorCode.INVALID_REQUEST
