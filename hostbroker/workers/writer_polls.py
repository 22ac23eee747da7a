"""Long-poll FETCHes a writer holds for the handlers (part of ``hb-writer-N``).

Mixed into :class:`~hostbroker.workers.writer.WriterWorker`, whose partition
logs, rings and books it uses. Owns: the POLLs handlers leave here (a FETCH
of one partition of this log dir that must wait for data), each answered
straight to the client's processor as soon as a round's appends give it
``min_bytes`` (after the round's log ends are published), when its deadline
passes, or at once when the broker drains or the writer stops: one process
crossing fewer between a produce and the fetch that returns it than through
the handler. The answer is the handler's, built the same way: the file range
of the partition's segment (``fetch_range``), sent by the processor with
sendfile. A POLL this writer cannot serve (too many held, the partition gone
or offline, an answer its ring cannot take now) goes back to its handler
(POLL_BACK), which answers or parks it as ever; one answered here is told to
the handler (POLL_DONE) so it forgets it. How many it holds is on the
process board (FETCH_PARKED, as handlers and processors show theirs), for
``hostbroker_fetch_long_polls``.

With the authorizer on, a POLL carries the ACLs' stamp of the authorizer
its handler decided READ with (workers/access.py: a hash of the published
bindings and ``refused``, not of the quotas). Once the ACLs published have
another stamp (an ACL removed or added since), the poll is not answered
here: it goes back to its handler (POLL_BACK), which decides again and
answers the refusal (TOPIC_AUTHORIZATION_FAILED, none of the data) or keeps
the fetch itself; a change of the quotas alone leaves the polls here. The
writer looks at the document's generation (one load) whenever it looks at
its polls, and at least every ``_ACL_RECHECK_MS`` while it holds any, and
reads the stamp again only when the generation moved, so a revoked fetch is
answered within a moment, not at its deadline.
"""

from __future__ import annotations

import time

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.log.partition import PartitionLog
from hostbroker.log.segments import fetch_range
from hostbroker.protocol.api import ApiKey
from hostbroker.shm import procs
from hostbroker.shm.published import PublishedDocument
from hostbroker.workers import envelopes as env
from hostbroker.workers.access import AclsStamps
from hostbroker.workers.answers import fetch_answer_pieces
from hostbroker.workers.base import now_ms


_NEVER = 1 << 62
_ACL_RECHECK_MS = 100  # polls held: the ACL generation looked at at least this often


class Polls:
    """Mixin of :class:`WriterWorker`: long polls held and answered here.

    Books: ``polls`` (slot -> [(handler, Poll)]), ``polls_held`` (their
    number), ``polls_new`` (slots given a POLL this round) and
    ``polls_deadline`` (the soonest deadline, or later)."""

    acl_stamps: AclsStamps | None = None  # (the authorizer on: _init_polls)
    acl_seen = -1  # the ACLs' stamp the held polls were last looked at in

    def _init_polls(self) -> None:
        self.polls: dict[int, list[tuple[int, env.Poll]]] = {}
        self.polls_held = 0
        self.polls_new: set[int] = set()
        self.polls_deadline = _NEVER
        self.max_polls = self.config["fetch.max.parked"]
        # the published ACLs' stamp, read again when their generation moves
        self.acl_stamps = (AclsStamps(PublishedDocument.attach(self.plan.access_name,
                                                               readonly=True))
                           if self.config["authorizer.enable"] else None)

    def _take_poll(self, h: int, m, out: list) -> None:
        poll = env.decode_poll(m)
        plog = None if self.offline else (self.slots.get(poll.slot) or self._adopt(poll.slot))
        if (plog is None or (plog.topic, plog.partition) != (poll.topic, poll.partition)
                or self.polls_held >= self.max_polls
                or not self._serves_consumers(poll.slot, plog)):
            out.append((env.encode_op(env.OP_POLL_BACK, poll.token),))
            return
        self.polls.setdefault(poll.slot, []).append((h, poll))
        self.polls_held += 1
        self.polls_new.add(poll.slot)  # looked at after this round's publish
        self.polls_deadline = min(self.polls_deadline, poll.deadline_ms)
        self._show_polls()

    def _show_polls(self) -> None:
        """Put the number of polls held here on the board (FETCH_PARKED)."""
        self.board.set(self.slot, procs.FETCH_PARKED, self.polls_held)

    def _answer_polls(self, results: list[list], now: int, touched=(),
                      force: bool = False) -> None:
        """Answer the held POLLs that have their data (of the slots this round
        appended to, or given a POLL), their deadline, or (``force``, or the
        broker draining) must go now; give back those of partitions this
        writer no longer serves."""
        if not self.polls:
            return
        force = force or self.board.broker_state == procs.BROKER_DRAINING
        expired = now >= self.polls_deadline
        acls = -1 if self.acl_stamps is None else self.acl_stamps.current()
        acls_moved = acls != self.acl_seen
        self.acl_seen = acls
        woken: set[int] = set()
        for slot in list(self.polls):
            plog = None if self.offline else self.slots.get(slot)
            if not (force or expired or acls_moved or plog is None or slot in touched
                    or slot in self.polls_new):
                continue
            keep = []
            for h, poll in self.polls[slot]:
                if plog is None or (plog.topic, plog.partition) != (poll.topic, poll.partition) \
                        or not self._serves_consumers(slot, plog) \
                        or 0 <= poll.acl_stamp != acls:
                    # deleted or offline (or no longer led) since, or the ACLs
                    # changed since its READ was decided: the handler answers
                    # what became of it
                    results[h].append((env.encode_op(env.OP_POLL_BACK, poll.token),))
                    continue
                part, length = self._poll_part(poll, plog)
                if 0 <= length < poll.min_bytes and not force and now < poll.deadline_ms:
                    keep.append((h, poll))
                    continue
                d = poll.direct
                op = env.OP_POLL_BACK  # (unless it goes now: the handler answers it)
                try:
                    pieces = fetch_answer_pieces(d.correlation_id, [part],
                                                 self.max_response_bytes)
                except ValueError:
                    pieces = None
                if pieces is not None and self.answer_rings[d.processor].try_send(
                        *env.encode_response(d.conn_id, d.seq, 0, pieces, time.monotonic_ns())):
                    op = env.OP_POLL_DONE
                    woken.add(d.processor)
                    self.count(procs.REQUESTS)
                    self.count(procs.BYTES_OUT, max(0, length))
                    if self.stats.fetched((part,), ((slot, None),)):
                        self.stats.error(ApiKey.FETCH)
                results[h].append((env.encode_op(op, poll.token),))
            self.polls_held -= len(self.polls[slot]) - len(keep)
            if keep:
                self.polls[slot] = keep
            else:
                del self.polls[slot]
        self.polls_new.clear()
        self._show_polls()
        if expired:
            self.polls_deadline = min((p.deadline_ms for held in self.polls.values()
                                       for _, p in held), default=_NEVER)
        for p in woken:
            self.processor_bells[p].wake()

    def _poll_part(self, poll: env.Poll, plog: PartitionLog) -> tuple[tuple, int]:
        """What the FETCH answer of ``poll`` says of its partition, from the log
        as published (as ``answers.fetch_parts`` gives it), and the
        length of its data (-1 when it is an error: due at once). A replica's
        consumers read below its high watermark, and wait at an offset between
        it and the log end."""
        end = self._readable_end(poll.slot, plog)
        bases = plog.segment_bases
        code, piece, length = ErrorCode.NONE, None, 0
        if end < poll.offset <= plog.log_end_offset:
            return (poll.topic, poll.partition, code, end, piece), length
        try:
            index, position, length = fetch_range(bases, end, poll.offset, poll.max_bytes)
        except HostbrokerError as e:
            code, length = e.code, -1
        else:
            # a segment that ends past the high watermark is read only up to it
            length = min(length, end - poll.offset)
        if length > 0:
            piece = env.FilePiece(plog.segment_path(bases[index]), position, length)
        return (poll.topic, poll.partition, code, end, piece), length

    def _polls_timeout_ms(self) -> int | None:
        if not self.polls:
            return None
        if self.acl_stamps is not None:  # (a revocation moves no ring)
            return min(self.polls_deadline, now_ms() + _ACL_RECHECK_MS)
        return self.polls_deadline
