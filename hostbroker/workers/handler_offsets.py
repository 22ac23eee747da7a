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
    def _offset_commit(self, p, conn_id, seq, corr, request) -> None:
        entries = [[request.group, part.topic, part.partition, part.offset, part.metadata]
                   for part in request.partitions]

        def respond(pending, failed: bool = False) -> None:
            code = ErrorCode.UNKNOWN if failed else ErrorCode(pending.results[0]["error"])
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        api.OffsetCommitResponse(tuple(
                            api.OffsetCommitPartitionResult(e[1], e[2], code)
                            for e in entries)))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.OFFSET_COMMIT, [], respond)
        self._to_writer(pending, 0, *env.encode_json(
            env.OP_OFFSETS, pending.token, {"op": "commit", "entries": entries}))

    def _offset_fetch(self, p, conn_id, seq, corr, request) -> None:
        keys = [[request.group, part.topic, part.partition] for part in request.partitions]

        def respond(pending, failed: bool = False) -> None:
            result = {} if failed else pending.results[0]
            code = ErrorCode.UNKNOWN if failed else ErrorCode(result["error"])
            offsets = result.get("offsets") or [[-1, ""]] * len(keys)
            self._reply(pending.processor, pending.conn_id, pending.seq, pending.correlation_id,
                        api.OffsetFetchResponse(tuple(
                            api.OffsetFetchPartitionResult(k[1], k[2], o[0], o[1], code)
                            for k, o in zip(keys, offsets))))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.OFFSET_FETCH, [], respond)
        self._to_writer(pending, 0, *env.encode_json(
            env.OP_OFFSETS, pending.token, {"op": "fetch", "keys": keys}))
