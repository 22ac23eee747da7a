"""Which way a request frame takes from its processor: the one decision
(a part of :mod:`hostbroker.workers.processor`; docs/architecture.md, "A
request's route").

A whole frame read by a processor takes one of five routes:

=============  ==============================================================
``HANDLER``    into the request ring of the connection's handler, which
               answers it (every request may go this way; the others are
               ways past the handler, each for a few requests)
``ANSWER``     METADATA and OFFSETS answered here from the partition table
               (``processor.local.requests``; :mod:`~hostbroker.workers.answers`)
``FETCH``      a FETCH answered here, or parked here until its data comes
               (``processor.local.fetch``; :mod:`~hostbroker.workers.processor_fetch`)
``PUT``        a lone PRODUCE put straight into its partition's writer's
               ``put`` ring (``processor.direct.produce``; the writer answers)
``GROUP_PUT``  OFFSET_COMMIT, OFFSET_FETCH or HEARTBEAT put on the ``cput``
               ring to hb-coordinator (``processor.direct.groups``;
               :mod:`~hostbroker.workers.processor_groups`)
=============  ==============================================================

:meth:`Routes.route` decides it from what is known before the frame is
decoded: its api key and version, its size, whether it is the last frame
read, and its connection's state (requests at the handler, pipelining, a
quota, TLS, its ACL decisions), with the settings fixed when the processor
starts. The rules:

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

A route past the handler may still decline once it has looked into the
frame (a PRODUCE of two partitions or acks=0, a partition not ONLINE, a
FETCH that must wait past ``processor.fetch.max.parked``, a ring with no
room, a frame that does not decode): the frame then goes to the handler,
which answers it as ever. A FETCH the handler takes and that must wait
waits at its partition's writer (a POLL) if it asks for one ONLINE
partition and ``fetch.writer.polls`` is on; any other waits at the handler
(decided by the handler). The same decision says whether a large PRODUCE whose first
bytes have come may be received straight into a ``put`` ring record
(:mod:`~hostbroker.workers.processor_claims`).
"""

from __future__ import annotations

from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto
from hostbroker.protocol.throttled import throttled_answer
from hostbroker.workers.answers import LOCAL_KEYS

HANDLER, ANSWER, FETCH, PUT, GROUP_PUT = range(5)
NAMES = ("handler", "answer", "fetch", "put", "group_put")

GROUP_PUT_KEYS = frozenset((api.ApiKey.OFFSET_COMMIT, api.ApiKey.OFFSET_FETCH,
                            gproto.GroupApiKey.HEARTBEAT))
_FETCH = api.ApiKey.FETCH
_PRODUCE = api.ApiKey.PRODUCE
_V0 = api.API_VERSION


class Routes:
    """A processor's route decision, with its settings (see the module doc).

    ``answers`` and ``tls_answers``: METADATA and OFFSETS of plain and of
    TLS connections may be answered here; ``fetch``: FETCHes answered or
    parked here; ``put_max``: the largest frame a PUT takes (-1: no PUTs);
    ``group_puts``: GROUP_PUTs on; ``enforcing``: the authorizer is on.
    """

    __slots__ = ("answers", "tls_answers", "fetch", "put_max", "group_puts", "enforcing")

    def __init__(self, *, answers: bool = False, tls_answers: bool = False,
                 fetch: bool = False, put_max: int = -1, group_puts: bool = False,
                 enforcing: bool = False):
        self.answers = answers
        self.tls_answers = tls_answers
        self.fetch = fetch
        self.put_max = put_max
        self.group_puts = group_puts
        self.enforcing = enforcing

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
