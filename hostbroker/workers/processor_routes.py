"""Which way a request frame takes from its processor: the one decision
(a part of :mod:`hostbroker.workers.processor`; docs/architecture.md, "A
request's route").

A whole frame read by a processor takes one of six routes:

=============  ==============================================================
``HANDLER``    into the request ring of the connection's handler, which
               answers it (every request may go this way; the others are
               ways past the handler, each for a few requests)
``ANSWER``     METADATA and OFFSETS answered here from the partition table
               (``processor.local.requests``; :mod:`~hostbroker.workers.answers`)
``FETCH``      a FETCH answered here (``processor.local.fetch``;
               :mod:`~hostbroker.workers.processor_fetch`)
``PARKED``     a FETCH taken here that must wait: parked here until its
               data comes or its deadline (``processor.fetch.max.parked``)
``PUT``        a lone PRODUCE put straight into its partition's writer's
               ``put`` ring (``processor.direct.produce``; the writer answers)
``GROUP_PUT``  OFFSET_COMMIT, OFFSET_FETCH or HEARTBEAT put on the ``cput``
               ring to hb-coordinator (``processor.direct.groups``;
               :mod:`~hostbroker.workers.processor_groups`)
=============  ==============================================================

It is decided in two steps. :meth:`Routes.route` decides it from what is
known before the frame is decoded: its api key and version, its size,
whether it is the last frame read, and its connection's state (requests at
the handler, pipelining, a quota, TLS, its ACL decisions), with the settings
fixed when the processor starts. The rules:

- nothing passes a request of its connection still at the handler (its
  answer could overtake that one's);
- the ways past the handler but the GROUP_PUT take version 0, and PRODUCE
  v1 and FETCH v2 (version 0's bodies) from a connection without a quota,
  answered in their own layout with a throttle time of 0; a metered
  connection's go to the handler, which writes their throttle time in as
  they are held; a GROUP_PUT takes every version (hb-coordinator answers in
  the version asked);
- METADATA and OFFSETS are answered here only for a connection whose
  identity the handler does not refuse (with the authorizer on);
- a PUT and a GROUP_PUT stop the reading of their connection until they are
  answered, so only the last frame read of a connection that waits for each
  answer (not pipelining, :meth:`ProcessorWorker._pipelining_still`) goes;
  a PUT only up to what one ``put`` ring record holds.

The same first step says whether a large PRODUCE whose first bytes have
come may be received straight into a ``put`` ring record
(:mod:`~hostbroker.workers.processor_claims`).

A FETCH, PUT or GROUP_PUT then has its frame looked into by the code of its
route, which reads what the second step needs into a :class:`Peek` (the
frame decoded within its route's bounds, the ACL's answer, a PRODUCE's acks
and partition count, its partition ONLINE, its writer asleep, a FETCH that
must wait and the room among the parked ones) and acts on
:meth:`Routes.confirm`: the route, PARKED for a FETCH that waits here, or
HANDLER, and the frame goes to the handler, which answers it as ever (a
frame that does not decode or a table that cannot be read goes there too).

A FETCH the handler takes and that must wait waits at its partition's
writer (a POLL) or at the handler: :func:`polls_at_writer` says which.
"""

from __future__ import annotations

from typing import NamedTuple

from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto
from hostbroker.protocol.throttled import throttled_answer
from hostbroker.workers.answers import LOCAL_KEYS

HANDLER, ANSWER, FETCH, PUT, GROUP_PUT, PARKED = range(6)
NAMES = ("handler", "answer", "fetch", "put", "group_put", "parked")

GROUP_PUT_KEYS = frozenset((api.ApiKey.OFFSET_COMMIT, api.ApiKey.OFFSET_FETCH,
                            gproto.GroupApiKey.HEARTBEAT))
_FETCH = api.ApiKey.FETCH
_PRODUCE = api.ApiKey.PRODUCE
_V0 = api.API_VERSION


class Peek(NamedTuple):
    """What the code of a route read of a frame, for :meth:`Routes.confirm`
    (each field as it is when nothing is against the route)."""

    decoded: bool = True  # decoded, within its route's bounds (partitions, the round's budget)
    allowed: bool = True  # the ACLs allow it (always, with the authorizer off)
    acks: int = 1  # PUT: the PRODUCE's acks
    partitions: int = 1  # PUT: how many partitions it names
    online: bool = True  # PUT: its partition ONLINE here, of a writer this processor has
    size: int = -1  # PUT: the frame's bytes (-1: not all of it here yet)
    asleep: bool = True  # PUT: its writer asleep
    wait: bool = False  # FETCH: its data falls short of min_bytes, with time to wait
    parked_here: bool = False  # FETCH: its connection has a FETCH parked already
    parked_parts: int = 0  # FETCH: the partitions parked here with it


NOT_DECODED = Peek(decoded=False)


class Routes:
    """A processor's route decision, with its settings (see the module doc).

    ``answers`` and ``tls_answers``: METADATA and OFFSETS of plain and of
    TLS connections may be answered here; ``fetch``: FETCHes answered or
    parked here; ``put_max``: the largest frame a PUT takes (-1: no PUTs);
    ``group_puts``: GROUP_PUTs on; ``enforcing``: the authorizer is on;
    ``busy_max``: the largest PUT a writer that is awake takes;
    ``max_parked``: the partitions FETCHes parked here may wait on, together.
    """

    __slots__ = ("answers", "tls_answers", "fetch", "put_max", "group_puts", "enforcing",
                 "busy_max", "max_parked")

    def __init__(self, *, answers: bool = False, tls_answers: bool = False,
                 fetch: bool = False, put_max: int = -1, group_puts: bool = False,
                 enforcing: bool = False, busy_max: int = -1, max_parked: int = 0):
        self.answers = answers
        self.tls_answers = tls_answers
        self.fetch = fetch
        self.put_max = put_max
        self.group_puts = group_puts
        self.enforcing = enforcing
        self.busy_max = busy_max
        self.max_parked = max_parked

    def route(self, conn, api_key: int, version: int, size: int, last: bool) -> int:
        """The route of a frame of ``api_key`` and ``version``, ``size`` bytes
        past its size field, of connection ``conn`` (its ``at_handler``,
        ``pipelining``, ``quota``, ``tls`` and ``decisions``); ``last``: no
        byte of the connection was read past it."""
        if conn.at_handler:
            return HANDLER
        fast = version == _V0 or (conn.quota is None and throttled_answer(api_key, version))
        if api_key in LOCAL_KEYS:
            if (fast and (self.answers if conn.tls is None else self.tls_answers)
                    and (not self.enforcing or conn.decisions is not None)):
                return ANSWER
            return HANDLER
        if api_key == _FETCH:
            return FETCH if fast and self.fetch else HANDLER
        if not last or conn.pipelining:
            return HANDLER
        if api_key == _PRODUCE:
            return PUT if fast and size <= self.put_max else HANDLER
        if api_key in GROUP_PUT_KEYS and self.group_puts:
            return GROUP_PUT
        return HANDLER

    def confirm(self, route: int, peek: Peek) -> int:
        """The final route of a frame :meth:`route` gave ``route`` (FETCH, PUT
        or GROUP_PUT), from ``peek``, what its route's code read of it: that
        route, PARKED for a FETCH that waits here, or HANDLER."""
        if not peek.decoded or not peek.allowed:
            return HANDLER
        if route == PUT:
            if (peek.acks != 1 or peek.partitions != 1 or not peek.online
                    or not (peek.asleep or 0 <= peek.size <= self.busy_max)):
                return HANDLER
            return PUT
        if route == FETCH and peek.wait:
            if peek.parked_here or peek.parked_parts > self.max_parked:
                return HANDLER  # one parked here per connection, and the bound
            return PARKED
        return route


def polls_at_writer(writer_polls: bool, version0: bool, partitions: int, online: bool,
                    replicated: bool) -> bool:
    """Whether a FETCH the handler took and that must wait waits at its
    partition's writer (a POLL, which answers in version 0's layout) rather
    than at the handler: ``fetch.writer.polls`` on, version 0, one partition,
    ONLINE, not replicated (a replicated partition's fetch is read below its
    high watermark, at the handler)."""
    return writer_polls and version0 and partitions == 1 and online and not replicated
