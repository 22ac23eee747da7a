"""FETCH and long polls of the request handler (part of ``hb-handler-N``).

Mixed into :class:`~hostbroker.workers.handler.HandlerWorker`. A fetch is
turned into ``(segment file, position, length)`` per partition from the
partition table and the segment listings, and answered with those ranges
(the processor sends them with sendfile). With fewer than ``min_bytes``
there it is parked until a writer rings (new data) or ``max_wait_ms`` passes;
a fetch of one partition is parked at that partition's writer instead
(a POLL, ``fetch.writer.polls``), which answers it to the processor itself
once its appends bring the data (``writer_polls.py``), and gives it back to
be parked here if it cannot keep it.
"""

from __future__ import annotations

import dataclasses

from hostbroker.errors import ErrorCode
from hostbroker.protocol import replication as rproto
from hostbroker.protocol import throttled
from hostbroker.protocol.api import ApiKey
from hostbroker.security.acl import Operation
from hostbroker.shm import partitions as ptable
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.answers import fetch_answer_pieces, fetch_must_wait, fetch_parts
from hostbroker.workers.base import now_ms
from hostbroker.workers.processor_routes import polls_at_writer

_RECHECK_MS = 100


@dataclasses.dataclass(slots=True, eq=False)
class _ParkedFetch:
    """A long-poll fetch waiting for ``min_bytes`` or its deadline."""

    processor: int
    conn_id: int
    seq: int
    correlation_id: int
    request: object
    deadline_ms: int


class Fetching:
    """Mixin of :class:`HandlerWorker`: FETCH, parked and answered."""

    # -- fetch ---------------------------------------------------------------
    def _fetch(self, p, conn_id, seq, corr, request) -> None:
        if not self._answer_fetch(p, conn_id, seq, corr, request, force=self.draining):
            return
        max_wait = min(max(0, request.max_wait_ms), self.config["fetch.max.wait.ms"])
        deadline = now_ms() + max_wait
        if not self._poll_at_writer(p, conn_id, seq, corr, request, deadline):
            self._park(p, conn_id, seq, corr, request, deadline)

    def _park(self, p, conn_id, seq, corr, request, deadline: int) -> None:
        if len(self.parked) >= self.config["fetch.max.parked"]:
            self._answer_fetch(p, conn_id, seq, corr, request, force=True)
            return
        self.parked.append(_ParkedFetch(p, conn_id, seq, corr, request, deadline))

    def _poll_at_writer(self, p, conn_id, seq, corr, request, deadline: int) -> bool:
        """Leave a fetch of one ONLINE partition that must wait to its writer
        (a POLL); True if sent. The writer answers the processor and says so
        (POLL_DONE), or gives it back (POLL_BACK); given back, or if the writer
        dies first, it is answered or parked here as any other. Which way it
        waits is :func:`~hostbroker.workers.processor_routes.polls_at_writer`'s
        answer."""
        lone = len(request.partitions) == 1
        slot = s = None
        if lone:
            part = request.partitions[0]
            slot = self.view.slot(part.topic, part.partition)
            if slot is not None:
                s = self.table.read(slot)
        if not polls_at_writer(self.writer_polls,
                               type(request) not in (rproto.FetchRequestV1,
                                                     throttled.FetchRequestV2),
                               len(request.partitions),
                               s is not None and s.state == ptable.ONLINE,
                               slot in self.view.replicated):
            return False

        def respond(pending, failed: bool = False) -> None:
            if self._answer_fetch(p, conn_id, seq, corr, request,
                                  force=self.draining or now_ms() >= deadline):
                self._park(p, conn_id, seq, corr, request, deadline)

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.FETCH, [], respond)
        pending.remaining = 1
        pending.writers.add(s.owner)
        self.appends[s.owner].send(env.encode_poll(env.Poll(
            pending.token, slot, s.name, s.partition, part.offset,
            min(part.max_bytes, self.config["fetch.max.bytes"]), request.min_bytes, deadline,
            env.Direct(p, conn_id, seq, corr), self._decided_at(p, conn_id))))
        self.dirty_writers.add(s.owner)
        return True

    def _answer_fetch(self, p, conn_id, seq, corr, request, force: bool) -> bool:
        """Answer the fetch if it may be answered now; returns True if it must wait."""
        self.answering = ApiKey.FETCH  # (a parked one is answered later)
        if isinstance(request, rproto.FetchRequestV1):
            return self._answer_fetch_v1(p, conn_id, seq, corr, request, force)
        reads: list = []
        # (topics the principal may not READ, asked again for a parked fetch)
        refused = self._refused_topics(p, conn_id, Operation.READ,
                                       {q.topic for q in request.partitions}) \
            if self.enforcing else frozenset()
        total, parts = fetch_parts(self.view, request.partitions,
                                   self.config["fetch.max.bytes"], reads, refused)
        # (nothing to wait for when every partition has an error)
        if not force and request.max_wait_ms > 0 and fetch_must_wait(parts, total,
                                                                     request.min_bytes):
            return True
        try:
            pieces = fetch_answer_pieces(corr, parts, self.max_response_bytes)
            if type(request) is throttled.FetchRequestV2:
                pieces = throttled.fetch_v2_parts(pieces)
        except ValueError:
            self._fail(p, conn_id, seq, corr, ErrorCode.INVALID_REQUEST)
            return False
        self.count(procs.BYTES_OUT, total)
        self._respond(p, conn_id, seq, pieces, error=self.stats.fetched(parts, reads))
        return False

    def _parked_due(self) -> bool:
        """Whether a parked fetch may have become answerable since the last
        recheck: a writer appended (its counter moved; ``appended_seen`` is
        read before this round looks at the log), a deadline passed, the
        broker is draining, or ``_RECHECK_MS`` went by (what moves no counter:
        a partition gone offline, retention)."""
        now = now_ms()
        if (self.draining or self.appended_seen != self.rechecked_appended
                or now - self.rechecked_ms >= _RECHECK_MS):
            return True
        return now >= min(x.deadline_ms for x in self.parked)

    def _recheck_parked(self) -> None:
        now = now_ms()
        self.rechecked_ms = now
        self.rechecked_appended = self.appended_seen
        still = []
        for x in self.parked:
            if self._answer_fetch(x.processor, x.conn_id, x.seq, x.correlation_id, x.request,
                                  force=self.draining or now >= x.deadline_ms):
                still.append(x)
        self.parked = still
