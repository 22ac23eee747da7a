"""OFFSET_COMMIT, OFFSET_FETCH and the group requests in the request handler
(part of ``hb-handler-N``).

Mixed into :class:`~hostbroker.workers.handler.HandlerWorker`. The handler
checks each entry and forwards the rest to writer 0, which owns the consumer
offsets store (:mod:`hostbroker.log.offsetstore`) and the group state
(:mod:`hostbroker.workers.writer_groups`), and answers when it has. Every
commit carries its ``(generation, member_id)`` (``(-1, "")`` for version 0)
so writer 0 fences it (docs/spec/groups.md); a fenced commit answers every
entry with the fence's code.

Group requests become ``OP_GROUP`` ops. A JOIN_GROUP whose rebalance waits
stays in ``pending`` under its token until writer 0 answers; the handler
holds at most ``group.max.parked.joins`` of them (one more is answered
BROKER_NOT_AVAILABLE at once) and drops those of a connection that closed.
A writer 0 replaced meanwhile fails them, as every pending request:
BROKER_NOT_AVAILABLE (the member joins again with its member id).
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto
from hostbroker.protocol.api import ApiKey
from hostbroker.workers import envelopes as env

_FENCE_CODES = (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION)


class ConsumerOffsets:
    """Mixin of :class:`HandlerWorker`: consumer group offsets."""

    # -- consumer offsets ----------------------------------------------------
    def _commit_error(self, part) -> ErrorCode:
        """Why one OFFSET_COMMIT entry cannot be stored, or NONE."""
        if self.view.slot(part.topic, part.partition) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        metadata = (part.metadata or "").encode("utf-8", "replace")
        if len(metadata) > self.config["offset.metadata.max.bytes"]:
            return ErrorCode.INVALID_REQUEST
        return ErrorCode.NONE

    def _offset_commit(self, p, conn_id, seq, corr, request) -> None:
        """Store the entries of existing partitions with metadata within
        ``offset.metadata.max.bytes``; the others are answered with their error
        and not stored."""
        self.view.refresh()
        codes = [self._commit_error(part) for part in request.partitions]
        entries = [[request.group, part.topic, part.partition, part.offset, part.metadata]
                   for part, code in zip(request.partitions, codes) if code == ErrorCode.NONE]

        fence = [getattr(request, "generation", gproto.NO_GENERATION),
                 getattr(request, "member_id", "")]

        def respond(pending, failed: bool = False) -> None:
            result = {} if failed or not pending.results else pending.results[0]
            stored = ErrorCode.UNKNOWN if failed else ErrorCode(result.get("error", 0))
            fenced = result.get("fenced", False)
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        api.OffsetCommitResponse(tuple(
                            api.OffsetCommitPartitionResult(
                                part.topic, part.partition,
                                stored if fenced else (code or stored))
                            for part, code in zip(request.partitions, codes))))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.OFFSET_COMMIT, [], respond)
        # to writer 0 even with nothing to store: the fence decides every entry's answer
        self._to_writer(pending, 0, *env.encode_json(
            env.OP_OFFSETS, pending.token, {"op": "commit", "group": request.group,
                                            "fence": fence, "entries": entries}))

    def _offset_fetch(self, p, conn_id, seq, corr, request) -> None:
        # each key once to the writer, however often the request repeats it
        keys = list(dict.fromkeys((request.group, part.topic, part.partition)
                                  for part in request.partitions))

        def respond(pending, failed: bool = False) -> None:
            result = {} if failed else pending.results[0]
            code = ErrorCode.UNKNOWN if failed else ErrorCode(result["error"])
            offsets = result.get("offsets") or [[-1, ""]] * len(keys)
            found = dict(zip(keys, offsets))
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        api.OffsetFetchResponse(tuple(
                            api.OffsetFetchPartitionResult(
                                part.topic, part.partition,
                                *found[(request.group, part.topic, part.partition)], code)
                            for part in request.partitions)))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.OFFSET_FETCH, [], respond)
        self._to_writer(pending, 0, *env.encode_json(
            env.OP_OFFSETS, pending.token, {"op": "fetch", "keys": [list(k) for k in keys]}))

    # -- consumer groups (docs/spec/groups.md) -------------------------------
    def _group_request(self, p, conn_id, seq, corr, header, request) -> None:
        key = header.api_key
        if key == gproto.GroupApiKey.JOIN_GROUP:
            payload = {"op": "join", "group": request.group, "member_id": request.member_id,
                       "client_id": header.client_id or "",
                       "session_timeout_ms": request.session_timeout_ms,
                       "rebalance_timeout_ms": request.rebalance_timeout_ms,
                       "topics": request.subscription()}
        elif key in (gproto.GroupApiKey.SYNC_GROUP, gproto.GroupApiKey.HEARTBEAT):
            payload = {"op": "sync" if key == gproto.GroupApiKey.SYNC_GROUP else "heartbeat",
                       "group": request.group, "generation": request.generation,
                       "member_id": request.member_id}
        elif key == gproto.GroupApiKey.LEAVE_GROUP:
            payload = {"op": "leave", "group": request.group, "member_id": request.member_id}
        elif key == gproto.GroupApiKey.DESCRIBE_GROUP:
            payload = {"op": "describe", "group": request.group}
        else:
            payload = {"op": "list"}

        def respond(pending, failed: bool = False) -> None:
            self.parked_joins.discard(pending.token)
            result = ({"error": int(ErrorCode.BROKER_NOT_AVAILABLE)} if failed
                      else pending.results[0])
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
        self._to_writer(pending, 0, *env.encode_json(env.OP_GROUP, pending.token, payload))

    def _drop_joins(self, conn_id: int) -> None:
        """Forget the joins a closed connection left waiting (writer 0's answer,
        when it comes, finds no token)."""
        for token in [t for t in self.parked_joins
                      if t not in self.pending or self.pending[t].conn_id == conn_id]:
            self.parked_joins.discard(token)
            self.pending.pop(token, None)


def _streams(entries) -> tuple:
    return tuple(gproto.StreamAssignment(topic, stream, tuple(parts))
                 for topic, stream, parts in entries)


def _group_answer(key: int, request, result: dict):
    """The answer to a group request from writer 0's result (a dict)."""
    code = ErrorCode(result["error"])
    if key == gproto.GroupApiKey.JOIN_GROUP:
        if code != ErrorCode.NONE:
            return gproto.JoinGroupResponse(code, gproto.NO_GENERATION,
                                            result.get("member_id", request.member_id), ())
        return gproto.JoinGroupResponse(code, result["generation"], result["member_id"],
                                        tuple(result["members"]))
    if key == gproto.GroupApiKey.SYNC_GROUP:
        return gproto.SyncGroupResponse(code, _streams(result.get("assignment", ())))
    if key == gproto.GroupApiKey.HEARTBEAT:
        return gproto.HeartbeatResponse(code)
    if key == gproto.GroupApiKey.LEAVE_GROUP:
        return gproto.LeaveGroupResponse(code)
    if key == gproto.GroupApiKey.DESCRIBE_GROUP:
        return gproto.DescribeGroupResponse(
            code, result.get("phase", ""), result.get("generation", -1),
            tuple(gproto.DescribedMember(mid, client_id, session_ms, _streams(streams))
                  for mid, client_id, session_ms, streams in result.get("members", ())))
    return gproto.ListGroupsResponse(code, tuple(result.get("groups", ())))
