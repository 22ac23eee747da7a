"""How a processor enforces quotas (a part of :mod:`hostbroker.workers.processor`;
docs/security.md, "Quotas").

Owns: the shared table of counters at start (:func:`make_quota_counters`,
the supervisor's); counting what each connection whose principal has a quota does, in
this processor's part of the shared table (:mod:`hostbroker.shm.quotas`):
the bytes of its PRODUCE requests, the bytes of its FETCH answers (file
pieces included; a follower's FETCH v1 is not a client's and is left out),
and every request; and holding the answers of a principal over its quota.

A connection has a :class:`Metered` (``Connection.quota``) only while a
quota applies to its principal (its own, else the ``<default>`` entity's):
every other connection costs one attribute test per request and answer,
and with no quota for anyone nothing is counted and no row touched. Which
connections are metered is looked at again when the published quotas
change (their generation moves; looked at every ``_LOOK_S``).

Holding, as Kafka: when an answer is ready, the principal's rates (summed
over every processor's part) are measured against its bounds (PRODUCE
answers against ``producer_byte_rate``, FETCH answers against
``consumer_byte_rate``, every answer against ``request_rate``), and
:func:`~hostbroker.security.quota.throttle_ms` says how long it waits, at
most ``quota.max.throttle.ms``. A held answer goes out when its time is
up, with every answer of the connection that came meanwhile (they keep
their order); while any is held the connection is not read (muted), so the
greedy client is slowed and the others of the processor are not: the hold
is a deadline in the processor's loop, never a wait. A PRODUCE v1 or FETCH
v2 answer carries the time it was held (:mod:`hostbroker.protocol.throttled`);
older versions are held silently. A broker that stops sends what it holds
at once.

:class:`Throttling` is a mixin of :class:`~hostbroker.workers.processor.ProcessorWorker`.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import time

from hostbroker.protocol import throttled
from hostbroker.protocol.api import ApiKey
from hostbroker.security.quota import Quota, throttle_ms
from hostbroker.shm.quotas import QuotaCounters, principal_key
from hostbroker.shm.region import SharedRegion
from hostbroker.workers.connection import Connection
from hostbroker.workers.envelopes import FilePiece

_LOOK_S = 0.1  # how often a processor looks whether the published quotas changed
_FETCH_V1 = 1  # a follower's FETCH: not counted against a consumer quota
_HEAD_VERSION = slice(2, 4)  # a frame's api_version, after its api_key


class Metered:
    """The quota state of one connection whose principal has a quota."""

    __slots__ = ("principal", "key", "quota", "row", "kinds", "held", "release_at")

    def __init__(self, principal: str, quota: Quota):
        self.principal = principal
        self.key = principal_key(principal)
        self.quota = quota
        self.row: int | None = None  # its principal's row in this processor's part
        self.kinds: dict[int, tuple[int, int]] = {}  # place -> (api key, version) of a request
        self.held: list[tuple[int, list, int]] = []  # answers held: (place, pieces, flags)
        self.release_at = 0.0  # monotonic time the held answers go out


class Throttling:
    """Quota accounting and answer holding; see the module doc."""

    def _init_throttle(self, plan, config) -> None:
        self.quota_counters = QuotaCounters.attach(plan.quotas_name, part=self.index)
        self.quota_max_ms = config["quota.max.throttle.ms"]
        self.quota_generation = -1
        self.quota_next = 0.0  # the next time _throttle_round has something to do
        self.quota_look_at = 0.0
        self.held_heap: list[tuple[float, int, Connection]] = []
        self._held_order = itertools.count()
        self._quota_full_said = False

    # -- which connections are metered -----------------------------------------
    def _quota_adopt(self, conn: Connection) -> None:
        """Meter a connection just taken if a quota applies to its principal."""
        quotas = self.access.quotas()
        if not quotas.entities or conn.identity is None:
            return
        self._meter(conn, quotas)

    def _meter(self, conn: Connection, quotas) -> None:
        """Meter ``conn`` by the quota of its principal now, or stop (a
        connection with answers held stays metered, unbounded, until they go)."""
        principal = str(conn.identity.principal)
        quota = quotas.of(principal)
        if conn.quota is not None:
            conn.quota.quota = quota
            if quota.empty and not conn.quota.held:
                conn.quota = None
        elif not quota.empty:
            conn.quota = Metered(principal, quota)

    def _quotas_changed(self) -> None:
        """The published quotas moved: meter again every connection."""
        quotas = self.access.quotas()
        self.quota_generation = self.access.document.generation
        for conn in self.conns.values():
            if conn.identity is not None and (quotas.entities or conn.quota is not None):
                self._meter(conn, quotas)

    def _throttle_round(self) -> None:
        """Once ``quota_next`` is reached: send the held answers whose time is
        up (all of them when stopping), and look whether the quotas changed."""
        now = self.now
        heap = self.held_heap
        while heap and (heap[0][0] <= now or self.stopping):
            _, _, conn = heapq.heappop(heap)
            self._release(conn, now)
        if now >= self.quota_look_at:
            self.quota_look_at = now + _LOOK_S
            if self.access.document.generation != self.quota_generation:
                self._quotas_changed()
        self.quota_next = min(self.quota_look_at, heap[0][0] if heap else self.quota_look_at)

    # -- counting ------------------------------------------------------------------
    def _count(self, metered: Metered, now: float, produce: int = 0, fetch: int = 0,
               requests: int = 0) -> None:
        counters = self.quota_counters
        row = counters.row_for(metered.key, now)
        metered.row = row
        if row is None:
            if not self._quota_full_said:
                self._quota_full_said = True
                print(f"hostbroker: {self.name}: more principals with a quota are busy than "
                      f"quota.max.principals ({counters.rows}); {metered.principal} is not "
                      "throttled here until one has been idle for a whole span",
                      file=sys.stderr, flush=True)
            return
        counters.add(row, now, produce, fetch, requests)

    def _quota_request(self, conn: Connection, api_key: int, version: int, size: int) -> None:
        """A request of metered ``conn`` was read (its place ``conn.next_seq``)."""
        metered = conn.quota
        metered.kinds[conn.next_seq] = (api_key, version)
        self._count(metered, time.monotonic(), size if api_key == ApiKey.PRODUCE else 0, 0, 1)

    def _quota_claimed(self, conn: Connection, api_key: int) -> None:
        """The large frame being received into a ring record is whole (before
        the record is let go): count it as :meth:`_quota_request`."""
        record = conn.claim
        if conn.claim_put is not None:
            version, size = 0, 4 + len(conn.claim_put[1]) + len(record)  # (PUTs are version 0)
        else:
            version, size = int.from_bytes(record[_HEAD_VERSION], "big", signed=True), \
                4 + len(record)
        self._quota_request(conn, api_key, version, size)

    # -- holding -------------------------------------------------------------------
    def _order_metered(self, conn: Connection, seq: int, pieces: list, flags: int) -> None:
        """``conn.order`` for a metered connection: count a FETCH answer, and
        hold the answer (muting the connection) for its throttle time."""
        metered = conn.quota
        api_key, version = metered.kinds.pop(seq, (-1, 0))
        now = time.monotonic()
        quota = metered.quota
        fetch = 0
        if api_key == ApiKey.FETCH and version != _FETCH_V1:
            fetch = sum(p.length if type(p) is FilePiece else len(p) for p in pieces)
            if fetch:
                self._count(metered, now, fetch=fetch)
        wait = 0
        if metered.row is not None:
            produce_rate, fetch_rate, request_rate, span = self.quota_counters.rates(
                metered.key, now)
            max_ms = self.quota_max_ms
            if api_key == ApiKey.PRODUCE and quota.producer_byte_rate:
                wait = throttle_ms(produce_rate, quota.producer_byte_rate, span, max_ms)
            elif fetch and quota.consumer_byte_rate:
                wait = throttle_ms(fetch_rate, quota.consumer_byte_rate, span, max_ms)
            if quota.request_rate:
                wait = max(wait, throttle_ms(request_rate, quota.request_rate, span, max_ms))
        if wait and throttled.throttled_answer(api_key, version):
            throttled.set_throttle_time(pieces, wait)
        if not wait and not metered.held:
            conn.order(seq, pieces, flags)
            return
        if not metered.held:
            self._set_reading(conn, False)  # muted until they go
        metered.held.append((seq, pieces, flags))
        release_at = now + wait / 1000
        conn.active = max(conn.active, release_at)  # (not idle while held)
        if release_at > metered.release_at:
            metered.release_at = release_at
            heapq.heappush(self.held_heap, (release_at, next(self._held_order), conn))
            self.quota_next = min(self.quota_next, release_at)

    def _release(self, conn: Connection, now: float) -> None:
        """Send ``conn``'s held answers if their time is up (or the broker stops)."""
        if self.conns.get(conn.conn_id) is not conn or conn.quota is None:
            return
        metered = conn.quota
        if metered.release_at > now and not self.stopping:
            return  # (held longer since: a later entry of the heap releases it)
        held, metered.held = metered.held, []
        for seq, pieces, flags in held:
            conn.order(seq, pieces, flags)
        if conn.fd in self.by_fd:
            self._write(conn)
            self._update_reading(conn)


def make_quota_counters(plan, config):
    """The supervisor's: the shared region of quota counters, a part per
    processor of ``quota.max.principals`` rows (zero-filled: pages a part
    never counts in take no memory). Returns the region."""
    windows = config["quota.window.num"]
    rows = config["quota.max.principals"]
    region = SharedRegion.create(plan.quotas_name, QuotaCounters.region_size(
        plan.num_processors, rows, windows))
    try:
        QuotaCounters.create(region, plan.num_processors, rows, windows,
                             config["quota.window.size.seconds"])
    except BaseException:
        region.close()
        region.unlink()
        raise
    return region
