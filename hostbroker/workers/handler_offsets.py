"""OFFSET_COMMIT, OFFSET_FETCH and the group requests in the request handler
(part of ``hb-handler-N``).

Mixed into :class:`~hostbroker.workers.handler.HandlerWorker`. The handler
checks each entry and forwards the rest to ``hb-coordinator``, which owns
the consumer offsets store (:mod:`hostbroker.log.offsetstore`) and the group
state (:mod:`hostbroker.workers.coordinator`), and answers when it has.
This module is the handler's one route for all of them
(:meth:`ConsumerOffsets._coordinator_op`). Every commit carries its
``(generation, member_id)`` (``(-1, "")`` for version 0) so the coordinator
fences it (docs/spec/groups.md); a fenced commit answers every entry with
the fence's code. What goes to the coordinator and the answer built from
what it says are :mod:`~hostbroker.workers.group_answers`'s, shared with
the processors, which send a connection's lone OFFSET_COMMIT, OFFSET_FETCH
and HEARTBEAT there themselves (``processor.direct.groups``): those that
come here are the rest.

Group requests become ``OP_GROUP`` ops. A JOIN_GROUP whose rebalance waits
stays in ``pending`` under its token until the coordinator answers; the
handler holds at most ``group.max.parked.joins`` of them (one more is
answered BROKER_NOT_AVAILABLE at once) and drops those of a connection that
closed. A coordinator replaced meanwhile fails them, as every pending
request: BROKER_NOT_AVAILABLE (the member joins again with its member id).
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from hostbroker.protocol import groups as gproto
from hostbroker.protocol.api import ApiKey
from hostbroker.workers import envelopes as env
from hostbroker.workers import group_answers


class ConsumerOffsets:
    """Mixin of :class:`HandlerWorker`: consumer group offsets."""

    # -- consumer offsets ----------------------------------------------------
    def _offset_commit(self, p, conn_id, seq, corr, request) -> None:
        """Store the entries of existing partitions with metadata within
        ``offset.metadata.max.bytes``; the others are answered with their error
        and not stored (:func:`~hostbroker.workers.group_answers.commit_op`),
        those of a topic the committer may not READ with
        TOPIC_AUTHORIZATION_FAILED (``self.refused``, handler_access.py)."""
        self.view.refresh()
        op = group_answers.commit_op(request, self.view, self.config["offset.metadata.max.bytes"])
        refused = self.refused
        if refused:
            op["entries"] = [e for e in op["entries"] if e[1] not in refused]
            op["parts"] = [[t, q, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED) if t in refused
                            else code] for t, q, code in op["parts"]]
        self._coordinator_op(p, conn_id, seq, corr, ApiKey.OFFSET_COMMIT, env.OP_OFFSETS, op)

    def _offset_fetch(self, p, conn_id, seq, corr, request) -> None:
        self._coordinator_op(p, conn_id, seq, corr, ApiKey.OFFSET_FETCH, env.OP_OFFSETS,
                         group_answers.fetch_op(request))

    def _coordinator_op(self, p, conn_id, seq, corr, key, envelope_op: int, op: dict) -> None:
        """Send ``op`` (:mod:`~hostbroker.workers.group_answers`) to the
        coordinator as ``envelope_op`` and answer from what it says, as a
        processor's GROUP_PUT is answered."""

        def respond(pending, failed: bool = False) -> None:
            result = None if failed else (pending.results[0] if pending.results else {})
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        group_answers.answer(op, result))

        pending = self._new_pending(p, conn_id, seq, corr, key, [], respond)
        self._to_writer(pending, self.coordinator,
                        *env.encode_json(envelope_op, pending.token, op))

    # -- consumer groups (docs/spec/groups.md) -------------------------------
    def _group_request(self, p, conn_id, seq, corr, header, request) -> None:
        key = header.api_key
        if key == gproto.GroupApiKey.HEARTBEAT:
            self._coordinator_op(p, conn_id, seq, corr, key, env.OP_GROUP,
                             group_answers.heartbeat_op(request))
            return
        if key == gproto.GroupApiKey.JOIN_GROUP:
            payload = {"op": "join", "group": request.group, "member_id": request.member_id,
                       "client_id": header.client_id or "",
                       "session_timeout_ms": request.session_timeout_ms,
                       "rebalance_timeout_ms": request.rebalance_timeout_ms,
                       "topics": request.subscription()}
        elif key == gproto.GroupApiKey.SYNC_GROUP:
            payload = {"op": "sync", "group": request.group, "generation": request.generation,
                       "member_id": request.member_id}
        elif key == gproto.GroupApiKey.LEAVE_GROUP:
            payload = {"op": "leave", "group": request.group, "member_id": request.member_id}
        elif key == gproto.GroupApiKey.DESCRIBE_GROUP:
            payload = {"op": "describe", "group": request.group}
        else:
            payload = {"op": "list"}
        shown = self._groups_shown(p, conn_id) if key == gproto.GroupApiKey.LIST_GROUPS else None

        def respond(pending, failed: bool = False) -> None:
            self.parked_joins.discard(pending.token)
            result = ({"error": int(ErrorCode.BROKER_NOT_AVAILABLE)} if failed
                      else pending.results[0])
            if shown is not None and result.get("groups"):
                # only the groups the principal may DESCRIBE (handler_access.py)
                result = {**result, "groups": [g for g in result["groups"] if shown(g)]}
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        _group_answer(key, request, result))

        pending = self._new_pending(p, conn_id, seq, corr, key, [], respond)
        if key == gproto.GroupApiKey.JOIN_GROUP:
            if len(self.parked_joins) >= self.max_parked_joins:
                self.parked_joins &= self.pending.keys()
            if len(self.parked_joins) >= self.max_parked_joins:
                del self.pending[pending.token]
                respond(pending, failed=True)
                return
            self.parked_joins.add(pending.token)
        self._to_writer(pending, self.coordinator,
                        *env.encode_json(env.OP_GROUP, pending.token, payload))

    def _drop_joins(self, conn_id: int) -> None:
        """Forget the joins a closed connection left waiting (the coordinator's
        answer, when it comes, finds no token)."""
        for token in [t for t in self.parked_joins
                      if t not in self.pending or self.pending[t].conn_id == conn_id]:
            self.parked_joins.discard(token)
            self.pending.pop(token, None)


def _streams(entries) -> tuple:
    return tuple(gproto.StreamAssignment(topic, stream, tuple(parts))
                 for topic, stream, parts in entries)


def group_error_answer(request, code: ErrorCode):
    """The answer of a group request (JOIN, SYNC, LEAVE, DESCRIBE, LIST)
    refused with ``code``."""
    return _group_answer(request.API_KEY, request, {"error": int(code)})


def _group_answer(key: int, request, result: dict):
    """The answer to a group request from the coordinator's result (a dict)."""
    code = ErrorCode(result["error"])
    if key == gproto.GroupApiKey.JOIN_GROUP:
        if code != ErrorCode.NONE:
            return gproto.JoinGroupResponse(code, gproto.NO_GENERATION,
                                            result.get("member_id", request.member_id), ())
        return gproto.JoinGroupResponse(code, result["generation"], result["member_id"],
                                        tuple(result["members"]))
    if key == gproto.GroupApiKey.SYNC_GROUP:
        return gproto.SyncGroupResponse(code, _streams(result.get("assignment", ())))
    if key == gproto.GroupApiKey.LEAVE_GROUP:
        return gproto.LeaveGroupResponse(code)
    if key == gproto.GroupApiKey.DESCRIBE_GROUP:
        return gproto.DescribeGroupResponse(
            code, result.get("phase", ""), result.get("generation", -1),
            tuple(gproto.DescribedMember(mid, client_id, session_ms, _streams(streams))
                  for mid, client_id, session_ms, streams in result.get("members", ())))
    return gproto.ListGroupsResponse(code, tuple(result.get("groups", ())))
