"""FETCHes a processor answers itself (``processor.local.fetch``; a part of
:mod:`hostbroker.workers.processor`).

Owns: the FETCHes of at most ``processor.fetch.max.partitions`` partitions
from connections with nothing at their handler (version 0, and version 2
from a connection without a quota, answered in its layout with a throttle
time of 0), answered here from the
partition table and the segment listings as a handler answers them
(:func:`~hostbroker.workers.answers.fetch_parts`: the same answer, sent as
any answer is, :mod:`~hostbroker.workers.sendfiles`), and those that must
wait for data, parked here (``parked``, by connection, one each at most)
until writers' appends bring ``min_bytes`` over all their partitions, their
deadline passes, or the broker stops. A fetch of one partition is read in a few struct calls
(:func:`~hostbroker.protocol.lone.peek_lone_fetch`), one of more by the
schema codec. No other process takes part: a consumer that waits for each
message costs one process's activation per fetch, not a handler's and a
writer's as well. One round of the processor looks up at most
``_ROUND_FETCHES`` times ``processor.fetch.max.partitions`` partitions for
new FETCHes; past that they go to the handler, so that a connection's
pipelined FETCHes hold its processor's other connections no longer.

A parked fetch is looked at again when the writers' appended counters move
(a writer that appends wakes a sleeping processor with fetches parked, as
it wakes such a handler; the counters are read before the log, so an append
between the two is seen on the next round), when its deadline passes, and
every ``_RECHECK_MS`` (what moves no counter: a partition gone offline or
deleted, retention). A look reads each of its partitions' slots in the
table first, and looks at the log only when one reads otherwise than when
the log was last looked at: one table read per partition waited on, so
``processor.fetch.max.parked`` (which counts partitions) bounds what an
append costs. A partition unknown when the fetch came is not waited on.
Past that bound (or with one of its connection waiting already) a fetch
that must wait goes to the handler, which leaves a fetch of one partition
at the writer; one whose data is there is still answered here. Each look
at a parked fetch asks again whether its connection may READ each topic (a
kept decision, decided anew once the ACLs changed): a topic revoked while
the fetch waits is answered TOPIC_AUTHORIZATION_FAILED. A parked fetch
does not stop its connection: later requests go on as ever (to the
handler, or a PUT), their answers queued behind it, and the connection is
not idle meanwhile.

:class:`LocalFetching` is a mixin of
:class:`~hostbroker.workers.processor.ProcessorWorker` and uses its
connections, partition view and counters.
"""

from __future__ import annotations

import sys
import traceback
from typing import NamedTuple

from hostbroker.errors import ErrorCode
from hostbroker.security.acl import Operation, ResourceType
from hostbroker.protocol import api, throttled
from hostbroker.protocol.lone import fetch_partition_count, peek_lone_fetch
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.answers import fetch_answer_pieces, fetch_must_wait, fetch_parts
from hostbroker.workers.base import now_ms
from hostbroker.workers.connection import Connection
from hostbroker.workers.processor_routes import FETCH, HANDLER, NOT_DECODED, PARKED, Peek

_RECHECK_MS = 100
_ROUND_FETCHES = 4  # processor.fetch.max.partitions x this: the partitions one round looks up


class _Parked(NamedTuple):
    conn: Connection
    seq: int
    correlation_id: int
    min_bytes: int
    parts: tuple  # what is fetched: topic, partition, offset, max_bytes each
    deadline_ms: int
    reads: tuple  # each partition's (slot, the slot as read before its log was looked at)
    version: int  # of the FETCH: its answer's layout (0, or 2 with a throttle time of 0)


def _answer_pieces(correlation_id: int, parts, max_header_bytes: int, version: int) -> list:
    """:func:`~hostbroker.workers.answers.fetch_answer_pieces` in the layout
    of FETCH ``version``: version 2's ends with a throttle time of 0, in its
    last piece of bytes (the message sets stay file ranges for sendfile)."""
    pieces = fetch_answer_pieces(correlation_id, parts, max_header_bytes)
    return pieces if version == api.API_VERSION else throttled.fetch_v2_parts(pieces)


class LocalFetching:
    """FETCHes answered or parked in the processor; see the module doc."""

    def _init_local_fetch(self) -> None:
        config = self.config
        self.local_fetch = config["processor.local.fetch"]
        self.fetch_max_bytes = config["fetch.max.bytes"]
        self.fetch_max_wait = config["fetch.max.wait.ms"]
        self.fetch_max_partitions = config["processor.fetch.max.partitions"]
        # partitions looked up for FETCHes in one round, at most: those past it
        # go to the handler, so that pipelined FETCHes of one connection hold
        # the processor's others no longer than this
        self.fetch_round_max = _ROUND_FETCHES * self.fetch_max_partitions
        self.fetch_looked = 0
        self.parked: dict[int, _Parked] = {}  # by connection id: one each at most
        self.parked_parts = 0  # the partitions they wait on, together
        self.parked_soonest = 0  # no later than the soonest deadline among them (ms)
        self.writer_slots = [self.plan.board_slot("writer", w)
                             for w in range(self.plan.num_writers)]
        self.appended_seen = -1  # the writers' counters, read before this round's fetches
        self.rechecked_appended = -1
        self.rechecked_ms = 0
        self.parked_shown = 0  # what the board says (FETCH_PARKED)

    def _appended(self) -> int:
        """Messages the writers have appended and high watermark moves (their
        board counters, summed)."""
        board = self.board
        return sum(board.get(slot, c) for slot in self.writer_slots for c in procs.LOG_MOVES)

    def _fetch_request(self, frame, version: int) -> tuple | None:
        """``(correlation_id, max_wait_ms, min_bytes, partitions)`` of a FETCH
        frame of ``version`` (0, or 2: the same body) this processor may take
        (of 1 to ``processor.fetch.max.partitions`` partitions, while this
        round has looked up fewer than ``_ROUND_FETCHES`` times that many),
        None for any other; raises for a frame that does not decode (the
        handler answers it)."""
        lone = peek_lone_fetch(frame, self.max_entries, version)
        if lone is not None:
            count = 1
        else:
            count = fetch_partition_count(frame, version)
            if count is None or not 2 <= count <= self.fetch_max_partitions:
                return None
        if self.fetch_looked + count > self.fetch_round_max:
            return None  # this round has looked up its share
        self.fetch_looked += count
        if lone is not None:
            return lone.correlation_id, lone.max_wait_ms, lone.min_bytes, (lone,)
        header = api.decode_request_header(frame)
        request = api.decode_body(api.REQUEST_TYPES[api.ApiKey.FETCH], frame, header.body_offset,
                                  self.max_entries)  # (version 2's body is version 0's)
        return header.correlation_id, request.max_wait_ms, request.min_bytes, request.partitions

    def _fetch_here(self, conn: Connection, frame, version: int) -> bool:
        """Answer a FETCH of ``conn`` (of ``version``, answered in its layout)
        here, or park it, as :meth:`Routes.confirm` says (FETCH or PARKED);
        False (nothing done) when it says HANDLER (an ACL refusal among them:
        the handler answers it, processor_access), or the frame does not
        decode."""
        try:
            found = self._fetch_request(frame, version)
            if found is None:
                peek = NOT_DECODED
            else:
                correlation_id, max_wait_ms, min_bytes, partitions = found
                allowed = not self.enforcing or self._conn_may_topics(
                    conn, Operation.READ, (p.topic for p in partitions))
                reads: list = []
                total, parts = fetch_parts(self.view, partitions, self.fetch_max_bytes, reads)
                wait = (max_wait_ms > 0 and not self.stopping
                        and fetch_must_wait(parts, total, min_bytes))
                # (positional, in Peek's order: decoded, allowed, the PUT's
                # fields, then the FETCH's; half the cost of keywords)
                peek = Peek(True, allowed, 1, 1, True, -1, True, wait,
                            conn.conn_id in self.parked, self.parked_parts + len(parts))
            route = self.routes.confirm(FETCH, peek)
            if route == HANDLER:
                return False
            wait = route == PARKED
            pieces = None if wait else _answer_pieces(correlation_id, parts,
                                                      self.max_response_bytes, version)
        except Exception:  # noqa: BLE001 - the handler answers (and says what went wrong)
            return False
        seq = conn.next_seq
        conn.next_seq += 1
        self.count(procs.REQUESTS)
        if wait:
            deadline = now_ms() + min(max_wait_ms, self.fetch_max_wait)
            self.parked_soonest = (min(self.parked_soonest, deadline) if self.parked
                                   else deadline)
            self.parked[conn.conn_id] = _Parked(conn, seq, correlation_id, min_bytes,
                                                tuple(partitions), deadline, tuple(reads),
                                                version)
            self.parked_parts += len(parts)
        else:
            if self.stats.fetched(parts, reads):
                self.stats.error(api.ApiKey.FETCH)
            self._answered(conn, seq)
            if conn.quota is None:
                conn.order(seq, pieces, 0)
            else:
                self._order_metered(conn, seq, pieces, 0)  # (throttle.py)
            self.answered_here.add(conn)
        return True

    def _unpark(self, conn_id: int) -> None:
        """Forget the fetch ``conn_id`` has waiting here, if any (its
        connection closes)."""
        x = self.parked.pop(conn_id, None)
        if x is not None:
            self.parked_parts -= len(x.parts)

    def _parked_due(self) -> bool:
        """Whether a parked fetch may have become answerable since the last
        recheck (as ``handler_fetch`` tells it)."""
        now = now_ms()
        if (self.stopping or self.appended_seen != self.rechecked_appended
                or now - self.rechecked_ms >= _RECHECK_MS
                or self.board.broker_state == procs.BROKER_DRAINING):
            return True
        return now >= self.parked_soonest

    def _recheck_parked(self) -> None:
        """Answer the parked fetches that have their data or must go now. One
        whose partitions' slots all read as they did when their logs were
        last looked at is not looked at again (one table read per partition)."""
        now = now_ms()
        self.rechecked_ms = now
        self.rechecked_appended = self.appended_seen
        force = self.stopping or self.board.broker_state == procs.BROKER_DRAINING
        view = self.view
        view.refresh()
        read = view.table.read
        slots: dict[int, tuple] = {}
        for conn_id, x in list(self.parked.items()):
            due = force or now >= x.deadline_ms
            try:
                if not due:
                    for slot, seen in x.reads:
                        if slot is None:
                            continue  # unknown when the fetch came: not waited on
                        s = slots.get(slot)
                        if s is None:
                            s = slots[slot] = read(slot)
                        if s != seen:
                            break
                    else:
                        continue
                # asked again (kept decisions: a dict read each, decided anew
                # once the ACLs changed): a topic revoked meanwhile is answered
                # TOPIC_AUTHORIZATION_FAILED, never with data
                refused = frozenset(
                    p.topic for p in x.parts if not self._conn_allows(
                        x.conn, Operation.READ, ResourceType.TOPIC, p.topic)
                ) if self.enforcing else frozenset()
                reads: list = []
                total, parts = fetch_parts(view, x.parts, self.fetch_max_bytes, reads, refused)
                if not due and fetch_must_wait(parts, total, x.min_bytes):
                    self.parked[conn_id] = x._replace(reads=tuple(reads))
                    continue
                try:
                    pieces = _answer_pieces(x.correlation_id, parts,
                                            self.max_response_bytes, x.version)
                    flags = 0
                    if self.stats.fetched(parts, reads):
                        self.stats.error(api.ApiKey.FETCH)
                except ValueError:  # as the handler answers it: the headers do not fit
                    pieces = [api.encode_error_frame(x.correlation_id,
                                                     ErrorCode.INVALID_REQUEST)]
                    flags = env.RESP_CLOSE_AFTER
                    self.stats.error(api.ApiKey.FETCH)
            except Exception:  # noqa: BLE001 - one request must never end the processor
                print(f"hostbroker: {self.name}: a parked FETCH failed unexpectedly; "
                      f"answered UNKNOWN", file=sys.stderr, flush=True)
                traceback.print_exc()
                pieces = [api.encode_error_frame(x.correlation_id, ErrorCode.UNKNOWN)]
                flags = env.RESP_CLOSE_AFTER
                self.stats.error(api.ApiKey.FETCH)
            del self.parked[conn_id]
            self.parked_parts -= len(x.parts)
            if x.conn.fd in self.by_fd and not x.conn.lingering:
                self._queue_answer(x.conn, x.seq, pieces, flags)
        self.parked_soonest = min((x.deadline_ms for x in self.parked.values()), default=0)

    def _fetch_timeout(self, timeout: float) -> float:
        """``timeout`` (s), no later than the soonest parked deadline or recheck."""
        soonest = min(self.parked_soonest, self.rechecked_ms + _RECHECK_MS)
        return max(0.0, min(timeout, (soonest - now_ms()) / 1000))

    def _show_parked(self) -> None:
        if len(self.parked) != self.parked_shown:
            self.parked_shown = len(self.parked)
            self.board.set(self.slot, procs.FETCH_PARKED, self.parked_shown)
