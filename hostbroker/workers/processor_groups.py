"""OFFSET_COMMITs, OFFSET_FETCHes and HEARTBEATs a processor sends the
coordinator itself (GROUP_PUTs, ``processor.direct.groups``; a part of
:mod:`hostbroker.workers.processor`).

``hb-coordinator`` holds the consumer offsets and the groups, so each of
these requests ends there; through the handler it crosses four times
(processor → handler → coordinator → handler → processor), sent from here
twice. One goes when nothing of its connection is at the handler and it is
the last frame read (as a PUT does): its op
(:mod:`~hostbroker.workers.group_answers`, the same checks a handler makes:
an entry of a partition that does not exist, or with metadata over
``offset.metadata.max.bytes``, is answered with its error and not stored)
goes on the ``cput`` ring to the coordinator with where its answer goes, and
nothing more of the connection is read until the coordinator has answered.
A frame that does not decode, one naming more than
``processor.direct.groups.max.partitions`` partitions (a processor holds its
other connections while it decodes and checks it), or a ring with no room
for it, takes the handler's way, which answers it as ever; a coordinator
that dies first has it answered here (``_fail_puts``) as a handler would.

:class:`GroupPutting` is a mixin of :class:`~hostbroker.workers.processor.ProcessorWorker`.
"""

from __future__ import annotations

from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers import group_answers
from hostbroker.workers.connection import Connection
from hostbroker.workers.processor_frames import SEQ_MASK
from hostbroker.workers.processor_routes import GROUP_PUT, Peek

class GroupPutting:
    """Sending GROUP_PUTs; see the module doc."""

    def _init_group_puts(self, config) -> None:
        on = config["processor.direct.groups"]  # (the route: processor_routes)
        self.group_puts = self.sender("cput", self.index, 0) if on else None
        self.max_metadata_bytes = config["offset.metadata.max.bytes"]
        self.group_put_max_entries = min(config["processor.direct.groups.max.partitions"],
                                         config["request.max.entries"])

    def _group_put(self, conn: Connection, frame) -> bool:
        """Send the request ``frame`` of ``conn`` (not pipelining: as for PUTs, its
        pipeline would stop at each one) to the coordinator, as :meth:`Routes.confirm`
        says; True if it went."""
        try:
            # (more partitions than processor.direct.groups.max.partitions: refused at
            # the count, and the handler decodes it all)
            header, request = gproto.decode_any_request(frame, self.group_put_max_entries)
            key = header.api_key
            peek = Peek(allowed=not self.enforcing or self._conn_may(conn, request))
            if self.routes.confirm(GROUP_PUT, peek) != GROUP_PUT:
                return False  # (an ACL refusal: the handler answers it, processor_access)
            if key == api.ApiKey.OFFSET_COMMIT:
                view = self.view
                view.refresh()
                op = group_answers.commit_op(request, view, self.max_metadata_bytes)
            elif key == api.ApiKey.OFFSET_FETCH:
                op = group_answers.fetch_op(request)
            else:
                op = group_answers.heartbeat_op(request)
        except Exception:  # noqa: BLE001 - the handler answers (and closes) as it always has
            return False
        direct = env.Direct(self.index, conn.conn_id, conn.next_seq & SEQ_MASK,
                            header.correlation_id)
        if not self.group_puts.try_send(*env.encode_group_put(direct, op)):
            return False
        self.count(procs.REQUESTS)
        self._put_sent(conn, self.plan.coordinator_peer, direct, group_answers.answer, op, None)
        return True
