"""Who sent a request, and whether it may (a part of
:mod:`hostbroker.workers.handler`; docs/security.md, "Where the checks run").

Owns: the identities of the connections a handler serves, per processor and
connection id, as their processor tells them (``REQ_PRINCIPAL``, before any
frame of the connection): forgotten when the connection closes
(``REQ_CLOSED``) and, all of one processor's, when that processor was
replaced (a REQ_PRINCIPAL of a newer processor epoch, which its connection
ids carry). A request is never answered as anyone but its connection's
identity: one whose identity its processor could not tell (``null``: more
than 256 groups) is refused NOT_AUTHORIZED (an error frame, and the
connection closes); one of a connection the handler was never told of (a
handler replaced, whose successor got a frame before the processor told it
the identities again) is closed with no answer, as after a handler crash,
so the client reconnects rather than reading a refusal it cannot retry.

Also owns the one decision per request (:meth:`HandlerAccess._authorize`),
from :func:`hostbroker.security.requests.needs`, made before the request
takes its route (so a request sent on to hb-coordinator is checked before it
leaves: the coordinator trusts its senders):

- a ``whole`` check refused: the request's own answer with the refusal
  (:func:`~hostbroker.security.requests.refusal_code`) where its answer
  has an error code (OFFSETS, the group requests, OFFSET_COMMIT and
  OFFSET_FETCH: every entry), else an error frame with the refusal, and
  the connection closes (as for any request the broker will not serve);
- ``each``: PRODUCE, FETCH (consumer, version 0), METADATA (every version)
  and OFFSET_COMMIT answer a refused topic in its place
  (TOPIC_AUTHORIZATION_FAILED) and serve the others; any other request
  naming a refused topic is refused whole;
- ``listed``: METADATA (every version) and DESCRIBE_TOPIC_CONFIGS leave
  out the topics the principal may not DESCRIBE, LIST_GROUPS and
  LIST_OFFSET_GROUPS the groups (all of them with DESCRIBE on the cluster;
  LIST_OFFSET_GROUPS also each group's topics it may not DESCRIBE);
- ``create`` (CREATE_TOPIC, and a PRODUCE's auto-create): CREATE on the
  cluster or on the topic.

A decision is kept per connection and (operation, resource) at one ACL
generation (``acl.connection.cache.entries``), as the processor keeps its
own. With ``authorizer.enable`` false nothing of this runs but the
identities (WHOAMI answers them).

:class:`HandlerAccess` is a mixin of :class:`~hostbroker.workers.handler.HandlerWorker`.
"""

from __future__ import annotations

import dataclasses

from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls as acls_proto
from hostbroker.protocol import api, bodies
from hostbroker.protocol import logdirs as logdirs_proto
from hostbroker.protocol import replication as replication_proto
from hostbroker.protocol import groups as gproto
from hostbroker.protocol import topics_admin
from hostbroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from hostbroker.security.principals import Identity
from hostbroker.security.requests import needs, refusal_code
from hostbroker.workers import envelopes as env
from hostbroker.workers import group_answers
from hostbroker.workers.access import KeptDecisions
from hostbroker.workers.handler_offsets import group_error_answer

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
NOTHING: frozenset = frozenset()
_EPOCH_BITS = 0xFFFFFF << 32  # a connection id's processor epoch (processor_conns)
# the requests whose route answers a refused topic in its place, or filters a listing
# (METADATA of every version: a refused named topic is answered 33, a listing filtered)
_METADATA = (bodies.MetadataRequest, replication_proto.MetadataRequestV1,
             logdirs_proto.MetadataRequestV2)
_PER_TOPIC = (bodies.ProduceRequest, bodies.FetchRequest, *_METADATA,
              bodies.OffsetCommitRequest, gproto.OffsetCommitRequestV1)
_FILTERED = (*_METADATA, gproto.ListGroupsRequest,
             topics_admin.ListOffsetGroupsRequest, topics_admin.DescribeTopicConfigsRequest)


@dataclasses.dataclass(slots=True, eq=False)
class Known:
    """One connection's identity, and the decisions made for it at one ACL
    generation."""

    identity: Identity
    decisions: KeptDecisions = dataclasses.field(default_factory=KeptDecisions)


class HandlerAccess:
    """A handler's identities and decisions; see the module doc."""

    enforcing = False  # (until _init_access: authorizer.enable)
    refused = NOTHING
    known: Known | None = None

    def _init_access(self) -> None:
        self.enforcing = self.access.enabled
        self.conn_cache_entries = self.config["acl.connection.cache.entries"]
        processors = self.plan.num_processors
        self.identities: list[dict[int, Known]] = [{} for _ in range(processors)]
        self.identity_epochs = [-1] * processors
        # the connections told as null (an identity too large to send): refused
        self.untold: list[set[int]] = [set() for _ in range(processors)]
        self.known: Known | None = None  # the identity of the request being answered

    def _on_principal(self, p: int, conn_id: int, m) -> None:
        epoch = conn_id & _EPOCH_BITS
        known = self.identities[p]
        if epoch != self.identity_epochs[p]:
            known.clear()  # its processor was replaced: its connections are gone
            self.untold[p].clear()
            self.identity_epochs[p] = epoch
        identity = env.decode_principal(m)
        if identity is None:
            known.pop(conn_id, None)
            self.untold[p].add(conn_id)
        else:
            known[conn_id] = Known(identity)
            self.untold[p].discard(conn_id)

    def _forget_principal(self, p: int, conn_id: int) -> None:
        self.identities[p].pop(conn_id, None)
        self.untold[p].discard(conn_id)

    def _nobody(self, p, conn_id, seq, corr) -> None:
        """Answer a request of a connection with no identity here (module doc)."""
        if conn_id in self.untold[p]:
            self._fail(p, conn_id, seq, corr, ErrorCode.NOT_AUTHORIZED)
        else:  # never told: closed unanswered, as a crashed handler's connections
            self._respond(p, conn_id, seq, [], env.RESP_CLOSE_NOW)

    # -- decisions ----------------------------------------------------------
    def _allows(self, known: Known, operation: Operation, resource_type: ResourceType,
                name: str = CLUSTER_NAME, keep: bool = True) -> bool:
        """The decision, kept for the connection (``acl.connection.cache.entries``;
        ``keep`` False: a listing's checks, not kept past the bound)."""
        return known.decisions.decide(self.access, known.identity, operation, resource_type,
                                      name, self.conn_cache_entries, keep)

    def _may_create(self, topic: str) -> bool:
        """May the request being answered create ``topic`` (CREATE on the
        cluster, or on the topic)? Always, with the authorizer off."""
        known = self.known
        if not self.enforcing:
            return True
        return known is not None and (self._allows(known, Operation.CREATE, CLUSTER)
                                      or self._allows(known, Operation.CREATE, TOPIC, topic))

    def _decided_at(self, p: int, conn_id: int) -> int:
        """The ACLs' stamp of the authorizer that made the decisions kept for
        the connection (-1 with the authorizer off): a fetch left at its writer
        carries it, and the writer gives it back once the ACLs published have
        another (writer_polls.py)."""
        if not self.enforcing:
            return -1
        known = self.identities[p].get(conn_id)
        return -1 if known is None else known.decisions.stamp

    def _describes(self, p: int, conn_id: int):
        """Whether the connection may DESCRIBE a topic, as a callable of its
        name (METADATA's and LIST_GROUPS' filters); None with the authorizer off."""
        if not self.enforcing:
            return None
        known = self.identities[p].get(conn_id)
        if known is None:
            return lambda name: False
        return lambda name, rtype=TOPIC: self._allows(known, Operation.DESCRIBE, rtype, name,
                                                      keep=False)

    def _groups_shown(self, p: int, conn_id: int):
        """LIST_GROUPS' filter: None (every group) with the authorizer off or
        DESCRIBE on the cluster, else whether the principal may DESCRIBE a group."""
        if not self.enforcing:
            return None
        known = self.identities[p].get(conn_id)
        if known is None:
            return lambda group: False
        if self._allows(known, Operation.DESCRIBE, CLUSTER):
            return None
        # (a listing's checks are not kept: they would push out the data path's)
        return lambda group: self._allows(known, Operation.DESCRIBE, GROUP, group, keep=False)

    def _refused_topics(self, p: int, conn_id: int, operation: Operation, topics) -> frozenset:
        """The topics of ``topics`` the connection may not ``operation`` (all of
        them for a connection not known); none with the authorizer off."""
        if not self.enforcing:
            return NOTHING
        known = self.identities[p].get(conn_id)
        if known is None:
            return frozenset(topics)
        return frozenset(t for t in topics if not self._allows(known, operation, TOPIC, t))

    def _authorize(self, p, conn_id, seq, corr, request) -> frozenset | None:
        """Check ``request`` (the authorizer on): None when it was refused and
        answered here; else the topics its route answers refused in their
        place (module doc)."""
        known = self.identities[p].get(conn_id)
        self.known = known
        if known is None:
            self._nobody(p, conn_id, seq, corr)
            return None
        n = needs(request)
        allows = self._allows
        for c in n.whole:
            if not allows(known, c.operation, c.resource_type, c.name):
                self._refuse(p, conn_id, seq, corr, request, refusal_code(c.resource_type))
                return None
        if n.create is not None and not self._may_create(n.create):
            self._refuse(p, conn_id, seq, corr, request, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            return None
        if n.listed is not None and not isinstance(request, _FILTERED) \
                and not allows(known, Operation.DESCRIBE, CLUSTER):
            self._refuse(p, conn_id, seq, corr, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            return None
        refused = [c for c in n.each if not allows(known, c.operation, c.resource_type, c.name)]
        if not refused:
            return NOTHING
        if not isinstance(request, _PER_TOPIC):
            self._refuse(p, conn_id, seq, corr, request, refusal_code(refused[0].resource_type))
            return None
        return frozenset(c.name for c in refused)

    def _refuse(self, p, conn_id, seq, corr, request, code: ErrorCode) -> None:
        """Answer ``request`` refused with ``code``: in its own answer where it
        has a place for it, else an error frame (and the connection closes)."""
        answer = None
        if isinstance(request, bodies.OffsetsRequest):
            answer = api.OffsetsResponse(code, ())
        elif isinstance(request, (bodies.OffsetCommitRequest, gproto.OffsetCommitRequestV1)):
            answer = group_answers.answer(
                {"op": "commit", "parts": [[q.topic, q.partition, 0]
                                           for q in request.partitions]}, {"error": int(code)})
        elif isinstance(request, bodies.OffsetFetchRequest):
            answer = group_answers.answer(group_answers.fetch_op(request), {"error": int(code)})
        elif isinstance(request, gproto.HeartbeatRequest):
            answer = gproto.HeartbeatResponse(code)
        elif isinstance(request, (gproto.JoinGroupRequest, gproto.SyncGroupRequest,
                                  gproto.LeaveGroupRequest, gproto.DescribeGroupRequest,
                                  gproto.ListGroupsRequest)):
            answer = group_error_answer(request, code)
        if answer is None:
            self._fail(p, conn_id, seq, corr, code)
        else:
            self._reply(p, conn_id, seq, corr, answer, error=True)

    # -- WHOAMI ---------------------------------------------------------------
    def _whoami(self, p, conn_id, seq, corr) -> None:
        known = self.identities[p].get(conn_id)
        if known is None:
            self._nobody(p, conn_id, seq, corr)
            return
        identity = known.identity
        self._reply(p, conn_id, seq, corr, acls_proto.WhoamiResponse(
            str(identity.principal), tuple(str(g) for g in identity.groups), identity.host,
            1 if self.enforcing else 0), error=False)
