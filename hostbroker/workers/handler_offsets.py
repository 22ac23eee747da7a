"""OFFSET_COMMIT and OFFSET_FETCH in the request handler (part of ``hb-handler-N``).

Mixed into :class:`~hostbroker.workers.handler.HandlerWorker`. The handler
checks each entry and forwards the rest to writer 0, which owns the consumer
offsets store (:mod:`hostbroker.log.offsetstore`), and answers when it has.
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol.api import ApiKey
from hostbroker.workers import envelopes as env


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

        def respond(pending, failed: bool = False) -> None:
            if failed:
                stored = ErrorCode.UNKNOWN
            else:
                stored = ErrorCode(pending.results[0]["error"]) if pending.results else ErrorCode.NONE
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        api.OffsetCommitResponse(tuple(
                            api.OffsetCommitPartitionResult(part.topic, part.partition,
                                                            code or stored)
                            for part, code in zip(request.partitions, codes))))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.OFFSET_COMMIT, [], respond)
        if not entries:
            del self.pending[pending.token]
            respond(pending)
            return
        self._to_writer(pending, 0, *env.encode_json(
            env.OP_OFFSETS, pending.token, {"op": "commit", "entries": entries}))

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
