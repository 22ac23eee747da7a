"""Every bound of the access control admin requests, against a real broker:
``acl.max.bindings``, ``quota.max.principals`` and ``acl.max.bytes`` refuse a
change whole (nothing of it kept, in the file or the published document);
``response.max.bytes`` cuts a description (and says so) and refuses a deletion
whose answer would not fit; ``request.max.entries`` bounds the entries of one
request; DELETE_ACLS examines at most 10 x ``acl.max.bindings`` bindings.

Every test keeps its own broker (``make_broker``): each changes the broker's
ACLs or quotas (or corrupts its ACL file) and asserts the whole set of them."""

from __future__ import annotations

import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls as w
from tests.access_admin.support import (
    READ, WRITE, alter, create, delete, describe, described, entry, file_acls, published_now,
    quotas_of)

OK = (ErrorCode.NONE, None)


@pytest.fixture
def small(make_broker):
    return make_broker(acl_max_bindings=5, quota_max_principals=1, request_max_entries=100)


def test_acl_max_bindings_refuses_a_creation_whole(small):
    with small.client() as c:
        kept = [entry(f"t{i}") for i in range(4)]
        assert create(c, *kept) == [OK] * 4
        generation = published_now(small)[0]
        results = create(c, entry("t0"), entry("new1"), entry("new2"))
        assert [code for code, _ in results] == [ErrorCode.INVALID_REQUEST] * 3
        assert all("acl.max.bindings (5)" in message for _, message in results)
        assert described(c) == set(kept)
        assert len(file_acls(small)) == 4
        assert published_now(small)[0] == generation
        assert create(c, entry("new1")) == [OK]


def test_quota_max_principals_counts_principals_not_the_default(small):
    with small.client() as c:
        assert alter(c, ("User:a", {"request_rate": 1}), ("<default>", {"request_rate": 2})) \
            == [OK, OK]
        (code, message), = alter(c, ("User:b", {"request_rate": 3}))
        assert code == ErrorCode.INVALID_REQUEST and "quota.max.principals (1)" in message
        assert quotas_of(c) == {"User:a": {"request_rate": 1}, "<default>": {"request_rate": 2}}
        # changing a principal that has one is no new principal
        assert alter(c, ("User:a", {"producer_byte_rate": 10})) == [OK]


def test_request_max_entries_bounds_the_filters_of_one_request(small):
    with small.client() as c:
        with pytest.raises(BrokerError) as caught:
            delete(c, *[w.AclFilterEntry(resource_name=f"t{i}") for i in range(101)])
        assert caught.value.code == ErrorCode.INVALID_REQUEST
    with small.client() as c:
        assert len(delete(c, *[w.AclFilterEntry(resource_name=f"t{i}")
                               for i in range(100)]).results) == 100


def test_delete_examines_a_bounded_number_of_bindings(small):
    with small.client() as c:
        assert create(c, *[entry(f"t{i}") for i in range(5)]) == [OK] * 5
        # filters naming no resource and no principal each look at all 5 bindings:
        # 11 of them pass 10 x acl.max.bindings
        wide = [w.AclFilterEntry(operation=WRITE, host=f"10.0.0.{i}") for i in range(11)]
        answer = delete(c, *wide, w.AclFilterEntry(resource_name="t0"))
        assert {r.error_code for r in answer.results} == {ErrorCode.INVALID_REQUEST}
        assert "examine more than" in answer.results[0].error_message
        assert len(described(c)) == 5
        # (each filter counts its bindings and one more: 8 x 6 + 2 = 50)
        answer = delete(c, *wide[:8], w.AclFilterEntry(resource_name="t0"))
        assert [len(r.deleted) for r in answer.results] == [0] * 8 + [1]
        assert len(described(c)) == 4


def test_acl_max_bytes_refuses_a_change_whole(make_broker):
    broker = make_broker(acl_max_bytes=4096)
    with broker.client() as c:
        assert create(c, entry("small")) == [OK]
        big = [entry("n" * 250 + str(i), "User:" + "p" * 200 + str(i)) for i in range(10)]
        results = create(c, *big)
        assert {code for code, _ in results} == {ErrorCode.INVALID_REQUEST}
        assert "more than acl.max.bytes (4096)" in results[0][1]
        assert described(c) == {entry("small")}
        (code, message), = alter(c, ("User:" + "q" * 250, {"request_rate": 1}))
        assert code == ErrorCode.NONE  # one more fits
        _, bindings, quotas = published_now(broker)
        assert [b.name for b in bindings] == ["small"] and len(quotas.entities) == 1


def test_response_max_bytes_cuts_a_description_and_refuses_a_wide_deletion(make_broker):
    broker = make_broker(response_max_bytes=65536)
    many = [entry("n" * 200 + f"{i:04}", op=READ) for i in range(400)]
    with broker.client() as c:
        assert create(c, *many) == [OK] * 400
        answer = describe(c)
        assert answer.error_code == ErrorCode.NONE and answer.truncated == 1
        assert 0 < len(answer.acls) < 400 and "response.max.bytes" in answer.error_message
        assert set(answer.acls) <= set(many)
        answer = delete(c, w.AclFilterEntry())
        (result,) = answer.results
        assert result.error_code == ErrorCode.INVALID_REQUEST
        assert "do not fit one answer" in result.error_message
        assert len(file_acls(broker)) == 400
        answer = delete(c, w.AclFilterEntry(resource_name=many[0].resource_name))
        assert answer.results[0].deleted == (many[0],)
        # a creation of many refusals still answers (messages past the bound dropped)
        results = create(c, *[entry("x", "bad principal " + "y" * 200)] * 2000)
        assert {code for code, _ in results} == {ErrorCode.INVALID_REQUEST}
        assert results[0][1] is not None and results[-1][1] is None


def test_thousands_of_quota_entities_in_one_request(make_broker):
    broker = make_broker(quota_max_principals=1000)
    with broker.client() as c:
        results = alter(c, *[(f"User:u{i}", {"request_rate": i + 1}) for i in range(1001)])
        assert {code for code, _ in results} == {ErrorCode.INVALID_REQUEST}
        assert "1001 principals with quotas would be more than quota.max.principals (1000)" \
            in results[0][1]
        assert quotas_of(c) == {}
        assert alter(c, *[(f"User:u{i}", {"request_rate": i + 1}) for i in range(1000)]) \
            == [OK] * 1000
        assert len(quotas_of(c)) == 1000
        assert len(published_now(broker)[2].entities) == 1000


@pytest.fixture
def tight(make_broker):
    return make_broker(response_max_bytes=65536)  # the setting's least; 10,000 entries a request


def test_no_answer_passes_response_max_bytes_however_many_entries(tight):
    from tests.access_admin.support import acl_file
    with tight.client() as c:
        # DELETE_ACLS: 2,000 bad filters, each refused with a line of its own
        answer = delete(c, *[w.AclFilterEntry(host="x" * 60)] * 2000)
        assert [r.error_code for r in answer.results] == [ErrorCode.INVALID_REQUEST] * 2000
        assert answer.results[0].error_message and answer.results[-1].error_message is None
        # DESCRIBE_QUOTAS: 1,000 long names, cut and said so
        names = tuple(f"User:{i:0100d}" for i in range(1000))
        cut = c.request(w.DescribeQuotasRequest(names))
        assert cut.error_code == ErrorCode.NONE and cut.truncated == 1
        assert 500 < len(cut.entities) < 1000
        # CREATE_ACLS: 10,000 refusals of bad principals
        results = create(c, *[entry(principal="nobody")] * 10_000)
        assert {code for code, _ in results} == {ErrorCode.INVALID_REQUEST}
        # DELETE_ACLS refused whole (a bad file): its line once, not per filter
        with open(acl_file(tight), "w") as f:
            f.write("not json")
        answer = delete(c, *[w.AclFilterEntry(resource_name=f"t{i}") for i in range(5000)])
        assert {r.error_code for r in answer.results} == {ErrorCode.STORAGE_ERROR}
        assert answer.results[0].error_message and answer.results[1].error_message is None
        assert described(c) == set()  # the connection is still served


def test_a_change_that_fits_freshly_encoded_is_not_refused_for_stale_strings(make_broker):
    # the handler keeps its encoding between changes, with the strings of
    # bindings removed until they pass a quarter of those in use; a change
    # whose set fits acl.max.bytes freshly encoded (as a start publishes it) is
    # made even when the kept encoding, stale strings and all, would not fit
    from hostbroker.security.quota import QuotaSet
    from hostbroker.security.store import AclEncoding, encode_published
    from hostbroker.security.admin_wire import binding_of

    def named(i):
        return entry(f"{i:02d}-" + "n" * 245, f"User:{i:02d}-" + "p" * 210)

    broker = make_broker(acl_max_bytes=4096, num_handlers=1)  # (one handler: one encoding)
    first, removed, added = [named(i) for i in range(8)], [named(0)], [named(8)]
    after = {binding_of(e) for e in first[1:] + added}
    kept = AclEncoding({binding_of(e) for e in first})
    kept.update({binding_of(e) for e in first[1:]})
    kept.update(after)
    assert kept.stale == 2  # (the premise: kept, it would not fit; fresh, it does)
    assert len(kept.published(QuotaSet())) > 4096 >= len(encode_published(after, QuotaSet()))
    with broker.client() as c:
        assert create(c, *first) == [OK] * 8
        for gone in removed:
            answer = delete(c, w.AclFilterEntry(resource_type=2, resource_name=gone.resource_name))
            assert answer.results[0].error_code == 0
        assert create(c, *added) == [OK]
        assert described(c) == set(first[1:] + added)
        _, bindings, _ = published_now(broker)
        assert set(bindings) == after
