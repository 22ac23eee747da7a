"""The ACLs' stamp (hostbroker/workers/access.py): what a fetch left at its writer
carries and the writer compares. It is the stamp of the authorizer that decided,
not of the document published now (a read that did not hold still keeps the
authorizer before); a change of the quotas alone moves the generation but not
the stamp, and keeps the authorizer. Over real shared memory; the torn read is
made as tests/workers/test_access.py makes it (the state moved under the reader)."""

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Identity, Principal
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import AclEncoding, encode_published
from hostbroker.shm.published import _LENGTH, _STATE, PublishedDocument
from hostbroker.workers.access import (TORN_RETRY_S, AccessView, AclsStamps, KeptDecisions,
                                       acls_stamp_of)
from tests.shm.conftest import created, names  # noqa: F401 (fixtures)

ALICE = Identity(Principal("User", "alice"))
T = ResourceType.TOPIC


def read(topic: str) -> AclBinding:
    return AclBinding.checked(T, topic, PatternType.LITERAL, ALICE.principal, "*",
                              Operation.READ, Permission.ALLOW)


def test_a_decision_through_a_torn_read_carries_the_stamp_of_its_authorizer(created):
    allowed = encode_published([read("t"), read("u")], QuotaSet())
    revoked = encode_published([read("u")], QuotaSet())
    doc = created(PublishedDocument, "pdoc", 1 << 16, allowed)
    now = [100.0]
    view = AccessView(doc, enabled=True, clock=lambda: now[0])
    writer = AclsStamps(doc, clock=lambda: now[0])
    kept = KeptDecisions()
    assert kept.decide(view, ALICE, Operation.READ, T, "t", 16)
    assert kept.stamp == acls_stamp_of(allowed) == writer.current()
    doc.publish(revoked)  # the revocation, then a read of it that does not hold still
    doc._words[_LENGTH + (doc._words[_STATE] & 1)] = doc.capacity + 1
    doc._words[_STATE] += 2
    kept.allowed.clear()  # (asked again, as a connection's first fetch after it would be)
    assert kept.decide(view, ALICE, Operation.READ, T, "t", 16)  # the authorizer before
    assert kept.stamp == acls_stamp_of(allowed)  # and its stamp, not the document's
    doc.publish(revoked)  # holds still again: the writer reads it
    assert writer.current() == acls_stamp_of(revoked) != kept.stamp  # the poll goes back
    now[0] += TORN_RETRY_S  # the view reads it too: refused, at the writer's stamp
    assert not kept.decide(view, ALICE, Operation.READ, T, "t", 16)
    assert kept.stamp == writer.current()


def test_a_change_of_the_quotas_alone_keeps_the_stamp_and_the_authorizer(created):
    encoding = AclEncoding([read("t")])
    doc = created(PublishedDocument, "pdoc", 1 << 16, encoding.published(QuotaSet()))
    view, writer = AccessView(doc, enabled=True), AclsStamps(doc)
    authorizer, stamp = view.authorizer(), view.acls_stamp()
    assert writer.current() == stamp
    quotas = QuotaSet().changed("User:bob", {"request_rate": 5})
    generation = doc.publish(encoding.published(quotas))
    assert view.quotas() == quotas and view.snapshot().generation == generation
    assert view.authorizer() is authorizer and view.acls_stamp() == writer.current() == stamp
    doc.publish(encoding.published(quotas, refused="acls.json: bad"))  # refused: moves
    assert view.acls_stamp() == writer.current() != stamp
    encoding.update({read("t"), read("u")})
    doc.publish(encoding.published(quotas))  # a binding more: moves
    assert view.authorizer().authorize(ALICE, Operation.READ, T, "u")
    assert view.acls_stamp() == writer.current() not in (stamp, -1)


def test_no_quota_can_fake_the_acls_part():
    # a quota entity naming the keys the stamp looks for is a string: escaped
    sly = QuotaSet().changed('User:x"],"quotas":[', {"request_rate": 1}).changed(
        'User:y","aclsRefused":"z', {"request_rate": 2})
    base = acls_stamp_of(encode_published([read("t")], QuotaSet()))
    assert acls_stamp_of(encode_published([read("t")], sly)) == base
    assert acls_stamp_of(encode_published([read("t")], sly, refused="r")) != base
