"""The group coordinator process, ``hb-coordinator`` (one per broker).

Owns: the consumer group coordinator (every group's members, generations
and assignment, and the joins waiting for their rebalance: ``groups.py``
around the pure state of :mod:`hostbroker.coordinator`), the consumer
offsets store it fences (:class:`~hostbroker.log.offsetstore.OffsetStore`,
``__consumer_offsets.log``, with the commits not yet on disk and the
OFFSET_FETCHes waiting for them: ``offsets.py``), ``__groups.log`` (the
groups' journal for a replacement), both in the first log dir, and a flusher
thread that runs the store's fdatasyncs.

Reads: the ``capp`` rings from every handler (``OP_GROUP`` and
``OP_OFFSETS`` json ops: every group request, every OFFSET_COMMIT and
OFFSET_FETCH that came through a handler), the ``cput`` rings from every
processor (GROUP_PUTs: a connection's lone OFFSET_COMMIT, OFFSET_FETCH or
HEARTBEAT, ``processor.direct.groups``; ``group_puts.py``), and the
partition table (read only: topics' partition counts). Writes: the ``cres``
rings back to every handler and the ``cans`` rings to every processor
(GROUP_PUT answers), and the two files above; never a segment, never the
partition table.

Why a process of its own: a request's cost here is the client's to choose
(a JOIN_GROUP's topics and streams, thousands of groups heartbeating), and
what it costs must not delay an append or a fetch of any partition. The
fence of an OFFSET_COMMIT (is its member of the current generation?) and
the storing of that commit still run in one process, one after the other,
as they did when both lived in writer 0. A coordinator that dies takes no
writer with it: its replacement loads ``__groups.log`` and the offsets
store, and the handlers and processors fail what it held (docs/architecture.md).
"""

from hostbroker.workers.coordinator.worker import CoordinatorWorker

__all__ = ["CoordinatorWorker"]
