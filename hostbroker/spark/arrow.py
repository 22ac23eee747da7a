"""One byte range of one partition read into Arrow record batches (runs in Spark tasks).

No Spark here: :func:`read_range` takes a :class:`~hostbroker.spark.planning.Range`
and yields ``pyarrow.RecordBatch``es of :data:`ARROW_SCHEMA` (of
:data:`CLUSTER_ARROW_SCHEMA`, with the broker id after the topic, for a range
of a cluster's broker). It fetches with
the next fetch already on the wire while it decodes the current one, decodes
each message set into columns (``hostbroker.log.columns``: no Python object
per message beyond its value), and builds a batch once it holds
``BATCH_ROWS`` rows or ``BATCH_BYTES`` of values: the topic and partition
columns are one repeated value each, ``next_offset`` is ``offset`` shifted by
one row (every message's next offset is the next message's offset, wrappers
included: docs/spec/log-format.md).

Retention may delete part of the range after it was planned: with
``failOnDataLoss`` the task fails naming the bytes lost, without it the read
goes on from the log start (or ends, when the whole range is gone). An entry
that cannot be read fails the task naming topic, partition and offset, or is
skipped with a warning under ``hostbroker.skip.bad.messages``. A partition
of a replicated topic whose leader moves during the read (NOT_LEADER_FOR_PARTITION,
a leader lost, a leader that refuses connections: a killed one that the
metadata still names) is read on from its new leader at the same byte offset,
as the SimpleConsumer finds it (``refresh.leader.*`` settings); when the
lookups run out the task fails with one line naming the partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from hostbroker.client.consumer import EARLIEST, SimpleConsumer
from hostbroker.client.fetched import FetchedSet
from hostbroker.client.errors import BrokerError, OffsetOutOfRangeError
from hostbroker.errors import InvalidMessageError, MessageTooLargeError
from hostbroker.log.columns import Columns, decode_into
from hostbroker.protocol import api
from hostbroker.spark.planning import DataLossError, Range
from hostbroker.spark.runs import take_run

log = logging.getLogger(__name__)

ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("next_offset", pa.int64()),
    ("value", pa.binary()),
])
CLUSTER_ARROW_SCHEMA = pa.schema([ARROW_SCHEMA.field(0), pa.field("broker", pa.int32()),
                                  *list(ARROW_SCHEMA)[1:]])
BATCH_ROWS = 65536
BATCH_BYTES = 16 * 1024 * 1024
# Bytes per fetch unless hostbroker.fetch.size says otherwise: four times the
# consumer's default. Fewer answers to parse and longer runs: a read of 100-byte
# messages went from 0.67 to 0.85 of the Arrow-only floor (docs/benchmarks-history.md).
FETCH_SIZE = 4 * 1024 * 1024


class LeaderLostError(RuntimeError):
    """A replicated partition's leader stayed unreachable or moving through every lookup."""


class _Rows:
    """The rows collected for the next batch, as column chunks: (offsets, values) pairs
    of Arrow arrays from runs, and the general decoder's lists."""

    def __init__(self) -> None:
        self.chunks: list[tuple[pa.Array, pa.Array]] = []
        self.columns = Columns()  # the general decoder's rows after the chunks
        self.count = 0
        self.value_bytes = 0

    def add_run(self, offsets: pa.Array, values: pa.Array) -> None:
        self._close_columns()
        self.chunks.append((offsets, values))
        self.count += len(values)
        self.value_bytes += values.nbytes

    def _close_columns(self) -> None:
        columns = self.columns
        if len(columns):
            self.chunks.append((pa.array(columns.offsets, pa.int64()),
                                pa.array(columns.values, pa.binary())))
            self.count += len(columns)
            self.value_bytes += columns.value_bytes
            self.columns = Columns()

    def size(self) -> tuple[int, int]:
        return self.count + len(self.columns), self.value_bytes + self.columns.value_bytes

    def batch(self, where: tuple[pa.Scalar, ...], end: int,
              next_offsets: list[int] | None) -> pa.RecordBatch:
        """The rows as one batch; ``where`` is (topic, partition) or (topic, broker,
        partition), one value each for every row; ``end`` is the offset after the last
        row. Rows that are not contiguous (an entry skipped) take ``next_offsets`` as
        collected."""
        self._close_columns()
        n = self.count
        offsets = pa.concat_arrays([c[0] for c in self.chunks])
        values = pa.concat_arrays([c[1] for c in self.chunks])
        if next_offsets is None:
            nexts = pa.concat_arrays([offsets.slice(1), pa.array([end], pa.int64())])
        else:
            nexts = pa.array(next_offsets, pa.int64())
        return pa.RecordBatch.from_arrays(
            [*(pa.repeat(value, n) for value in where), offsets, nexts, values],
            schema=ARROW_SCHEMA if len(where) == 2 else CLUSTER_ARROW_SCHEMA)


class _RangeReader:
    """The state of one range's read: the consumer, where the next fetch starts."""

    def __init__(self, rng: Range, client: Mapping[str, Any], fail_on_data_loss: bool):
        self.rng = rng
        self.fail_on_data_loss = fail_on_data_loss
        self.consumer = SimpleConsumer(list(rng.uris), {"fetch.size": FETCH_SIZE, **client,
                                                        "auto.offset.reset": "none"})
        self.check_crc = self.consumer.check_crcs
        self.max_bytes = self.consumer.max_fetch_size

    def _part(self, pos: int) -> api.FetchPartition:
        rng = self.rng
        return api.FetchPartition(rng.topic, rng.partition, pos,
                                  min(self.consumer.fetch_size, rng.end - pos))

    def _send(self, part: api.FetchPartition | None) -> OSError | None:
        """Send the FETCH of ``part`` (none when None); what the connection raised when
        its broker cannot be reached (a leader killed), for the read loop to handle
        as the answer's leader trouble."""
        if part is None:
            return None
        try:
            self.consumer.send_fetch((part,))
        except OSError as exc:
            return exc
        return None

    def _lost(self, pos: int) -> int:
        """Where to go on from ``pos`` after OFFSET_OUT_OF_RANGE (-1: nothing left)."""
        rng = self.rng
        (log_start,) = self.consumer.offsets_before(rng.topic, rng.partition, EARLIEST)
        what = (f"{rng.name}: bytes [{pos}, {min(log_start, rng.end)}) of the "
                f"range [{rng.start}, {rng.end}) were deleted before they were read")
        if pos >= log_start:
            what = (f"{rng.name}: offset {pos} is no longer in the log "
                    f"(the topic was deleted and created again?)")
        if self.fail_on_data_loss:
            raise DataLossError(what + " (failOnDataLoss is true)")
        log.warning("%s; going on from the log start %d (failOnDataLoss is false)", what,
                    log_start)
        return log_start if pos < log_start < self.rng.end else -1

    def _decode(self, rows: _Rows, fetched: FetchedSet) -> int:
        """Add the messages of ``fetched`` up to the range end to ``rows``; the offset
        after them. On a bad entry nothing of ``fetched`` is added and InvalidMessageError
        or MessageTooLargeError is raised."""
        data = fetched.message_set
        base = fetched.offset
        limit = min(len(data), self.rng.end - base)
        run = take_run(data, base, limit, self.max_bytes - 4, self.check_crc)
        if run is None:
            columns = rows.columns
            mark, before = len(columns), columns.value_bytes
            try:
                return decode_into(columns, data, base, end=self.rng.end,
                                   check_crc=self.check_crc, max_message_bytes=self.max_bytes,
                                   max_inflated_bytes=self.max_bytes)
            except (InvalidMessageError, MessageTooLargeError):
                del columns.offsets[mark:], columns.values[mark:]
                columns.value_bytes = before
                raise
        offsets, values, taken = run
        if taken < limit:
            # The rest goes through the general decoder first, so that a bad entry
            # raises before the run is added.
            rest = Columns()
            end = decode_into(rest, data[taken:], base + taken, end=self.rng.end,
                              check_crc=self.check_crc, max_message_bytes=self.max_bytes,
                              max_inflated_bytes=self.max_bytes)
        else:
            rest, end = None, base + taken
        rows.add_run(offsets, values)
        if rest is not None and len(rest):
            rows.add_run(pa.array(rest.offsets, pa.int64()), pa.array(rest.values, pa.binary()))
        return end

    def _one_by_one(self, fetched: FetchedSet) -> tuple[_Rows, list[int], int]:
        """The rows of a set with a bad entry, message by message, for the consumer's own
        wording of it (InvalidEntryError names topic, partition and offset) or
        skip.bad.messages: (rows, their next offsets, the offset after them)."""
        rows = _Rows()
        nexts: list[int] = []
        pos = fetched.offset
        for offset, following, value in fetched:
            if offset >= self.rng.end:
                break
            rows.columns.offsets.append(offset)
            rows.columns.values.append(value)
            rows.columns.value_bytes += len(value)
            nexts.append(following)
            pos = following
        return rows, nexts, max(pos, min(fetched.next_offset, self.rng.end))

    def batches(self) -> Iterator[pa.RecordBatch]:
        rng = self.rng
        where = (pa.scalar(rng.topic, pa.string()),
                 *(() if rng.broker is None else (pa.scalar(rng.broker, pa.int32()),)),
                 pa.scalar(rng.partition, pa.int32()))
        rows = _Rows()
        pos = rng.start
        consumer = self.consumer
        part = self._part(pos) if pos < rng.end else None
        unsent = self._send(part)  # what sending the fetch raised: its leader unreachable
        troubles = 0  # leader trouble in a row (a replicated partition's failover)
        while part is not None:
            try:
                if unsent is not None:
                    raise unsent
                (fetched,) = consumer.receive_fetch((part,))
            except OffsetOutOfRangeError:
                if rows.count or len(rows.columns):  # rows on both sides of a gap: 2 batches
                    yield rows.batch(where, pos, None)
                    rows = _Rows()
                pos = self._lost(part.offset)
                part = self._part(pos) if pos >= 0 else None
                unsent = self._send(part)
                continue
            except (BrokerError, OSError) as exc:
                unsent = None
                troubles += 1
                if not consumer.follow_leader(rng.topic, rng.partition, exc, troubles):
                    if troubles > 1:
                        raise LeaderLostError(f"{rng.name}: no leader answered in {troubles} "
                                              f"tries (refresh.leader.max.retries): {exc}"
                                              ) from exc
                    raise
                unsent = self._send(part)  # to the partition's leader now
                continue
            troubles = 0
            if not fetched.entries:
                raise DataLossError(f"{rng.name}: the log ends at "
                                    f"{fetched.log_end_offset}, before the range end {rng.end}")
            following = min(fetched.next_offset, rng.end)
            part = self._part(following) if following < rng.end else None
            unsent = self._send(part)
            try:
                pos = self._decode(rows, fetched)
            except (InvalidMessageError, MessageTooLargeError):
                if rows.count or len(rows.columns):
                    yield rows.batch(where, fetched.offset, None)
                    rows = _Rows()
                bad, nexts, pos = self._one_by_one(fetched)
                if nexts:
                    yield bad.batch(where, pos, nexts)
                continue
            count, value_bytes = rows.size()
            if count >= BATCH_ROWS or value_bytes >= BATCH_BYTES:
                yield rows.batch(where, pos, None)
                rows = _Rows()
        if rows.size()[0]:
            yield rows.batch(where, pos, None)

    def close(self) -> None:
        self.consumer.close()


def read_range(rng: Range, client: Mapping[str, Any], fail_on_data_loss: bool
               ) -> Iterator[pa.RecordBatch]:
    """The messages of ``rng`` as record batches of :data:`ARROW_SCHEMA`."""
    reader = _RangeReader(rng, client, fail_on_data_loss)
    try:
        yield from reader.batches()
    finally:
        reader.close()
