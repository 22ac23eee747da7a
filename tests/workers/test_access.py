"""A process's view of the published ACLs and quotas, over real shared memory."""

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Identity, Principal
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import encode_published
from hostbroker.shm.published import PublishedDocument
from hostbroker.workers.access import AccessView
from tests.shm.conftest import created, names  # noqa: F401 (fixtures)

ALICE = Identity(Principal("User", "alice"))
ROOT = Identity(Principal("User", "root"))
T = ResourceType.TOPIC


def read_orders():
    return AclBinding.checked(T, "orders", PatternType.LITERAL, ALICE.principal, "*",
                              Operation.READ, Permission.ALLOW)


def test_the_view_follows_the_generation_and_survives_a_bad_document(created):
    said = []
    doc = created(PublishedDocument, "pdoc", 1 << 16, encode_published([], QuotaSet()))
    view = AccessView(doc, enabled=True, super_users=[ROOT.principal], say=said.append)
    first = view.authorizer()
    assert not first.authorize(ALICE, Operation.READ, T, "orders")
    assert view.authorizer() is first  # same generation: nothing rebuilt
    quotas = QuotaSet().changed("User:alice", {"request_rate": 5})
    doc.publish(encode_published([read_orders()], quotas))
    assert view.authorizer().authorize(ALICE, Operation.READ, T, "orders")
    assert view.quotas() == quotas
    doc.publish(b"{not json")
    bad = view.authorizer()
    assert not bad.authorize(ALICE, Operation.READ, T, "orders")
    assert bad.authorize(ROOT, Operation.DELETE, T, "orders")  # super users still may
    assert view.quotas() == QuotaSet() and len(said) == 1 and "cannot be read" in said[0]
    doc.publish(b"{also not json")
    view.authorizer()
    assert len(said) == 1  # said once
    doc.publish(encode_published([read_orders()], quotas))
    assert view.authorizer().authorize(ALICE, Operation.READ, T, "orders")
    assert "read again" in said[-1]


def test_with_the_authorizer_off_there_is_none_but_quotas_are_read(created):
    quotas = QuotaSet().changed("<default>", {"producer_byte_rate": 1000})
    doc = created(PublishedDocument, "pdoc", 4096, encode_published([], quotas))
    view = AccessView(doc, enabled=False)
    assert view.authorizer() is None and view.quotas() == quotas


def test_a_refused_document_allows_the_super_users_only_and_says_nothing(created):
    said = []
    doc = created(PublishedDocument, "pdoc", 4096,
                  encode_published([read_orders()], QuotaSet(), refused="acls.json: bad"))
    view = AccessView(doc, enabled=True, super_users=[ROOT.principal], allow_if_no_acl=True,
                      say=said.append)
    authorizer = view.authorizer()
    assert not authorizer.authorize(ALICE, Operation.READ, T, "orders")
    assert not authorizer.authorize(ALICE, Operation.READ, T, "unnamed")  # no allow-if-no-acl
    assert authorizer.authorize(ROOT, Operation.READ, T, "orders") and said == []


def test_a_torn_read_keeps_what_was_read_and_is_tried_again_bounded(created):
    from hostbroker.shm.published import _LENGTH, _STATE
    from hostbroker.workers.access import TORN_GRACE_S, TORN_RETRY_S

    def tear():  # a document that never holds still, of the next generation
        doc._words[_LENGTH + (doc._words[_STATE] & 1)] = doc.capacity + 1
        doc._words[_STATE] += 2

    said, now = [], [100.0]
    doc = created(PublishedDocument, "pdoc", 1 << 16, encode_published([read_orders()],
                                                                       QuotaSet()))
    view = AccessView(doc, enabled=True, super_users=[ROOT.principal], say=said.append,
                      clock=lambda: now[0])
    assert view.authorizer().authorize(ALICE, Operation.READ, T, "orders")
    tear()
    assert view.authorizer().authorize(ALICE, Operation.READ, T, "orders")  # kept
    assert view.snapshot().failure is None and said == []
    # a document that holds again: the next check after TORN_RETRY_S reads it
    doc.publish(encode_published([], QuotaSet()))
    now[0] += TORN_RETRY_S
    assert not view.authorizer().authorize(ALICE, Operation.READ, T, "orders")
    assert said == []
    # one that never holds still: closed once no read held still for the grace
    tear()
    view.authorizer()
    now[0] += TORN_GRACE_S
    closed = view.authorizer()
    assert closed.authorize(ROOT, Operation.READ, T, "orders")
    assert view.snapshot().failure and len(said) == 1 and "cannot be read" in said[0]
    doc.publish(encode_published([read_orders()], QuotaSet()))  # the next publish mends it
    now[0] += TORN_RETRY_S
    assert view.authorizer().authorize(ALICE, Operation.READ, T, "orders")
    assert "read again" in said[-1]


def test_the_snapshot_is_decoded_once_per_generation(created):
    doc = created(PublishedDocument, "pdoc", 1 << 16, encode_published([read_orders()],
                                                                       QuotaSet()))
    view = AccessView(doc, enabled=False)
    first = view.snapshot()
    assert first.bindings == (read_orders(),) and view.snapshot() is first
    doc.publish(encode_published([], QuotaSet(), refused="acls.json: bad"))
    second = view.snapshot()
    assert second.bindings is None and second.refused == "acls.json: bad"
    assert second.generation == first.generation + 1
