"""FETCHes a processor answers itself (``processor.local.fetch``; a part of
:mod:`hostbroker.workers.processor`).

Owns: the one-partition FETCHes of connections with nothing at their
handler, answered here from the partition table and the segment listings
as a handler answers them (:func:`~hostbroker.workers.answers.fetch_part`:
the same answer, the data sent with sendfile), and those that must wait for
data, parked here (``parked``, by connection, one each at most) until a
writer's append brings ``min_bytes``, their deadline passes, or the broker
stops. No other process takes part: a consumer that waits for each message
costs one process's activation per fetch, not a handler's and a writer's
as well.

A parked fetch is looked at again when the writers' appended counters move
(a writer that appends wakes a sleeping processor with fetches parked, as
it wakes such a handler; the counters are read before the log, so an append
between the two is seen on the next round), when its deadline passes, and
every ``_RECHECK_MS`` (what moves no counter: a partition gone offline or
deleted, retention). A look reads the partition's slot in the table first,
and looks at the log only when the slot reads otherwise than when the log
was last looked at: one table read per partition waited on, so
``processor.fetch.max.parked`` bounds what an append costs. Past that bound
(or with one of its connection waiting already) a fetch that must wait goes
to the handler, which leaves it at the writer; one whose data is there is
still answered here. A parked fetch
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
from hostbroker.protocol import api
from hostbroker.protocol.lone import LoneFetch, peek_lone_fetch
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers.answers import fetch_answer_pieces, fetch_part
from hostbroker.workers.base import now_ms
from hostbroker.workers.connection import Connection

_RECHECK_MS = 100


class _Parked(NamedTuple):
    conn: Connection
    seq: int
    request: LoneFetch
    deadline_ms: int
    slot: int
    seen: tuple  # the partition's slot as read before its log was looked at


class LocalFetching:
    """FETCHes answered or parked in the processor; see the module doc."""

    def _init_local_fetch(self) -> None:
        config = self.config
        self.local_fetch = config["processor.local.fetch"]
        self.fetch_max_bytes = config["fetch.max.bytes"]
        self.fetch_max_wait = config["fetch.max.wait.ms"]
        self.max_parked = config["processor.fetch.max.parked"]
        self.parked: dict[int, _Parked] = {}  # by connection id: one each at most
        self.parked_soonest = 0  # no later than the soonest deadline among them (ms)
        self.writer_slots = [self.plan.board_slot("writer", w)
                             for w in range(self.plan.num_writers)]
        self.appended_seen = -1  # the writers' counters, read before this round's fetches
        self.rechecked_appended = -1
        self.rechecked_ms = 0
        self.parked_shown = 0  # what the board says (FETCH_PARKED)

    def _appended(self) -> int:
        """Messages the writers have appended (their board counters, summed)."""
        board = self.board
        return sum(board.get(slot, procs.MESSAGES_IN) for slot in self.writer_slots)

    def _fetch_here(self, conn: Connection, frame) -> bool:
        """Answer a lone FETCH of ``conn`` here, or park it; False (nothing
        done) for any other frame, or when it should go to the handler."""
        try:
            request = peek_lone_fetch(frame, self.max_entries)
            if request is None:
                return False
            self.view.refresh()
            part, slot, seen = fetch_part(self.view, request, self.fetch_max_bytes)
            piece = part[4]
            wait = (part[2] == ErrorCode.NONE and request.max_wait_ms > 0 and not self.stopping
                    and (0 if piece is None else piece.length) < request.min_bytes)
            if wait and (conn.conn_id in self.parked or len(self.parked) >= self.max_parked):
                return False  # the handler's way: one waiting here per connection, and the bound
            pieces = None if wait else fetch_answer_pieces(request.correlation_id, [part],
                                                           self.max_response_bytes)
        except Exception:  # noqa: BLE001 - the handler answers (and says what went wrong)
            return False
        seq = conn.next_seq
        conn.next_seq += 1
        self.count(procs.REQUESTS)
        if wait:
            deadline = now_ms() + min(request.max_wait_ms, self.fetch_max_wait)
            self.parked_soonest = (min(self.parked_soonest, deadline) if self.parked
                                   else deadline)
            self.parked[conn.conn_id] = _Parked(conn, seq, request, deadline, slot, seen)
        else:
            conn.order(seq, pieces, 0)
            self.answered_here.add(conn)
        return True

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
        whose partition's slot reads as it did when its log was last looked
        at is not looked at again (one table read per partition)."""
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
                    s = slots.get(x.slot)
                    if s is None:
                        s = slots[x.slot] = read(x.slot)
                    if s == x.seen:
                        continue
                part, slot, seen = fetch_part(view, x.request, self.fetch_max_bytes)
                piece = part[4]
                if (not due and part[2] == ErrorCode.NONE and slot is not None
                        and (0 if piece is None else piece.length) < x.request.min_bytes):
                    self.parked[conn_id] = x._replace(slot=slot, seen=seen)
                    continue
                pieces = fetch_answer_pieces(x.request.correlation_id, [part],
                                             self.max_response_bytes)
                flags = 0
            except Exception:  # noqa: BLE001 - one request must never end the processor
                print(f"hostbroker: {self.name}: a parked FETCH failed unexpectedly; "
                      f"answered UNKNOWN", file=sys.stderr, flush=True)
                traceback.print_exc()
                pieces = [api.encode_error_frame(x.request.correlation_id, ErrorCode.UNKNOWN)]
                flags = env.RESP_CLOSE_AFTER
            del self.parked[conn_id]
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
