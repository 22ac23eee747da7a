"""The identities a processor tells its handler (REQ_PRINCIPAL), how a handler
keeps and forgets them, and the decisions kept per connection following the
ACL generation, over a real published document in shared memory."""

from __future__ import annotations

import types

from hostbroker.errors import ErrorCode
from hostbroker.protocol import bodies
from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Identity, Principal
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import encode_published
from hostbroker.shm.published import PublishedDocument
from hostbroker.workers import envelopes as env
from hostbroker.workers.access import AccessView
from hostbroker.workers.handler_access import HandlerAccess
from tests.shm.conftest import created, names  # noqa: F401 (fixtures)

ALICE = Identity(Principal("User", "alice"), (Principal("Group", "team"),), "localhost")
T = ResourceType.TOPIC


def write_orders(principal="User:alice"):
    return AclBinding.checked(T, "orders", PatternType.LITERAL, Principal.parse(principal), "*",
                              Operation.WRITE, Permission.ALLOW)


def test_an_identity_crosses_the_ring_whole():
    m = env.encode_principal(7, ALICE, 5)
    conn_id, seq, flags, stamp = env.REQ_HEADER.unpack_from(m, 0)
    assert (conn_id, flags, stamp) == (7, env.REQ_PRINCIPAL, 5)
    assert env.decode_principal(m) == ALICE


def test_too_many_groups_or_garbage_is_nobody():
    crowd = Identity(ALICE.principal, tuple(Principal("Group", f"g{i}")
                                            for i in range(env.MAX_IDENTITY_GROUPS + 1)))
    assert env.decode_principal(env.encode_principal(1, crowd)) is None
    head = env.REQ_HEADER.pack(1, 0, env.REQ_PRINCIPAL, 0)
    for body in (b"", b"{", b"[1,2,3]", b'["User:a", [], 5]', b'["nocolon", [], "h"]',
                 b'["User:a", ["Group:x"], "' + b"h" * 300 + b'"]'):
        assert env.decode_principal(head + body) is None, body


class _Handler(HandlerAccess):
    """The identities part of a handler, answers recorded."""

    def __init__(self, doc, enabled=True):
        self.access = AccessView(doc, enabled=enabled)
        self.config = {"acl.connection.cache.entries": 4}
        self.plan = types.SimpleNamespace(num_processors=2)
        self.answers = []
        self._init_access()

    def _fail(self, p, conn_id, seq, corr, code):
        self.answers.append(("frame", conn_id, code))

    def _reply(self, p, conn_id, seq, corr, answer, error=None):
        self.answers.append(("reply", conn_id, answer))

    def _respond(self, p, conn_id, seq, pieces, flags=0):
        self.answers.append(("pieces", conn_id, tuple(pieces), flags))


def _conn(epoch: int, n: int, processor: int = 0) -> int:
    return (processor << 56) | (epoch << 32) | n


def test_a_handler_refuses_a_connection_it_does_not_know(created):
    doc = created(PublishedDocument, "pdoc", 1 << 16,
                  encode_published([write_orders()], QuotaSet()))
    h = _Handler(doc)
    produce = bodies.ProduceRequest(1, 100, (bodies.ProducePartition("orders", 0, b""),))
    # never told (a replaced handler before its processor told it again): closed
    # with no answer, so the client reconnects as after a handler crash
    assert h._authorize(0, _conn(1, 1), 0, 9, produce) is None
    assert h.answers[-1] == ("pieces", _conn(1, 1), (), env.RESP_CLOSE_NOW)
    # told as null (too many groups to send): refused
    crowd = Identity(ALICE.principal, tuple(Principal("Group", f"g{i}")
                                            for i in range(env.MAX_IDENTITY_GROUPS + 1)))
    h._on_principal(0, _conn(1, 2), env.encode_principal(_conn(1, 2), crowd))
    assert h._authorize(0, _conn(1, 2), 0, 9, produce) is None
    assert h.answers[-1] == ("frame", _conn(1, 2), ErrorCode.NOT_AUTHORIZED)
    h._on_principal(0, _conn(1, 1), env.encode_principal(_conn(1, 1), ALICE))
    assert h._authorize(0, _conn(1, 1), 1, 9, produce) == frozenset()
    # closed: forgotten
    h._forget_principal(0, _conn(1, 1))
    assert h._authorize(0, _conn(1, 1), 2, 9, produce) is None


def test_a_replaced_processor_s_connections_are_forgotten(created):
    doc = created(PublishedDocument, "pdoc", 1 << 16, encode_published([], QuotaSet()))
    h = _Handler(doc)
    for n in (1, 2):
        h._on_principal(0, _conn(1, n), env.encode_principal(_conn(1, n), ALICE))
    h._on_principal(1, _conn(1, 1, 1), env.encode_principal(_conn(1, 1, 1), ALICE))
    assert len(h.identities[0]) == 2
    # processor 0 replaced: its next connection carries the new epoch
    h._on_principal(0, _conn(2, 1), env.encode_principal(_conn(2, 1), ALICE))
    assert list(h.identities[0]) == [_conn(2, 1)]
    assert list(h.identities[1]) == [_conn(1, 1, 1)]  # another processor's stay


def test_decisions_are_kept_until_the_acls_change_and_bounded(created):
    doc = created(PublishedDocument, "pdoc", 1 << 16,
                  encode_published([write_orders()], QuotaSet()))
    h = _Handler(doc)
    h._on_principal(0, _conn(1, 1), env.encode_principal(_conn(1, 1), ALICE))
    known = h.identities[0][_conn(1, 1)]
    assert h._allows(known, Operation.WRITE, T, "orders")
    assert not h._allows(known, Operation.READ, T, "orders")
    assert len(known.decisions.allowed) == 2
    doc.publish(encode_published([write_orders("User:bob")], QuotaSet()))
    assert not h._allows(known, Operation.WRITE, T, "orders")  # the new generation decides
    assert len(known.decisions.allowed) == 1
    for i in range(10):
        h._allows(known, Operation.WRITE, T, f"t{i}")
    assert len(known.decisions.allowed) <= 4


def test_per_topic_refusals_and_whole_ones(created):
    doc = created(PublishedDocument, "pdoc", 1 << 16,
                  encode_published([write_orders()], QuotaSet()))
    h = _Handler(doc)
    conn = _conn(1, 1)
    h._on_principal(0, conn, env.encode_principal(conn, ALICE))
    produce = bodies.ProduceRequest(1, 100, (bodies.ProducePartition("orders", 0, b""),
                                             bodies.ProducePartition("other", 0, b"")))
    assert h._authorize(0, conn, 0, 1, produce) == frozenset({"other"})
    # OFFSETS has no place per topic: refused in its own answer
    assert h._authorize(0, conn, 1, 1, bodies.OffsetsRequest("other", 0, -1, 1)) is None
    kind, _, answer = h.answers[-1]
    assert kind == "reply" and answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # DELETE_TOPIC: an error frame
    assert h._authorize(0, conn, 2, 1, bodies.DeleteTopicRequest("orders")) is None
    assert h.answers[-1] == ("frame", conn, ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def test_with_the_authorizer_off_no_decision_is_built(created, monkeypatch):
    doc = created(PublishedDocument, "pdoc", 1 << 16, encode_published([], QuotaSet()))
    h = _Handler(doc, enabled=False)
    assert not h.enforcing
    assert h._describes(0, 1) is None and h._groups_shown(0, 1) is None
    assert h._refused_topics(0, 1, Operation.READ, {"a"}) == frozenset()
    assert h._may_create("anything")


def test_the_default_path_never_asks_what_a_request_needs(tmp_path, monkeypatch):
    """With ``authorizer.enable`` false a handler answers without building a
    request's needs (a needs() that raises would answer UNKNOWN)."""
    from hostbroker.protocol import api
    from hostbroker.workers import handler_access
    from tests.workers.handler_rig import Rig

    def refuse(request):
        raise AssertionError("needs() on the default path")

    monkeypatch.setattr(handler_access, "needs", refuse)
    rig = Rig(tmp_path, [-1])
    try:
        with rig.h._admin():
            rig.h._create_topic_locked("t", 1, {})
        rig.request(api.OffsetsRequest("t", 0, api.LATEST_TIME, 1))
        _, answer = api.decode_response(api.ApiKey.OFFSETS, rig.only_answer())
        assert answer.error_code == ErrorCode.NONE
    finally:
        rig.close()


def test_a_full_connection_cache_forgets_one_and_listings_push_nothing_out(created):
    doc = created(PublishedDocument, "pdoc", 1 << 16,
                  encode_published([write_orders()], QuotaSet()))
    h = _Handler(doc)  # (4 decisions kept per connection)
    conn = _conn(1, 1)
    h._on_principal(0, conn, env.encode_principal(conn, ALICE))
    known = h.identities[0][conn]
    for i in range(4):
        h._allows(known, Operation.WRITE, T, f"t{i}")
    # a METADATA of every topic: its checks are not kept once the cache is full
    describe = h._describes(0, conn)
    assert [describe(f"m{i}") for i in range(50)] == [False] * 50
    assert set(known.decisions.allowed) == {(Operation.WRITE, T, f"t{i}") for i in range(4)}
    # a fifth data decision forgets the oldest one only
    h._allows(known, Operation.WRITE, T, "orders")
    assert set(known.decisions.allowed) == {(Operation.WRITE, T, f"t{i}") for i in (1, 2, 3)} | \
        {(Operation.WRITE, T, "orders")}
