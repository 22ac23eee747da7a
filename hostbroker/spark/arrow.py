"""One byte range of one partition read into Arrow record batches (runs in Spark tasks).

No Spark here: :func:`read_range` takes a :class:`~hostbroker.spark.planning.Range`
and yields ``pyarrow.RecordBatch``es of :data:`ARROW_SCHEMA`. It fetches with
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
skipped with a warning under ``hostbroker.skip.bad.messages``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from hostbroker.client.consumer import EARLIEST, FetchedSet, SimpleConsumer
from hostbroker.client.errors import OffsetOutOfRangeError
from hostbroker.errors import InvalidMessageError, MessageTooLargeError
from hostbroker.log.columns import Columns, decode_into
from hostbroker.protocol import api
from hostbroker.spark.planning import DataLossError, Range

log = logging.getLogger(__name__)

ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("next_offset", pa.int64()),
    ("value", pa.binary()),
])
BATCH_ROWS = 65536
BATCH_BYTES = 16 * 1024 * 1024


def _batch(topic: pa.Scalar, partition: pa.Scalar, columns: Columns, end: int,
           contiguous: bool) -> pa.RecordBatch:
    """``columns`` as a batch; ``contiguous``: each row's next offset is the next row's
    offset (the last one's ``end``), so that column is a shifted copy, made in C."""
    n = len(columns)
    offsets = pa.array(columns.offsets, pa.int64())
    if contiguous:
        nexts = pa.concat_arrays([offsets.slice(1), pa.array([end], pa.int64())])
    else:
        nexts = pa.array(columns.next_offsets, pa.int64())
    return pa.RecordBatch.from_arrays(
        [pa.repeat(topic, n), pa.repeat(partition, n), offsets, nexts,
         pa.array(columns.values, pa.binary())],
        schema=ARROW_SCHEMA)


class _RangeReader:
    """The state of one range's read: the consumer, where the next fetch starts."""

    def __init__(self, rng: Range, client: Mapping[str, Any], fail_on_data_loss: bool):
        self.rng = rng
        self.fail_on_data_loss = fail_on_data_loss
        self.consumer = SimpleConsumer(list(rng.uris), {**client, "auto.offset.reset": "none"})
        self.check_crc = self.consumer.check_crcs
        self.max_bytes = self.consumer.max_fetch_size
        self.contiguous = True  # no entry skipped in the rows collected so far

    def _part(self, pos: int) -> api.FetchPartition:
        rng = self.rng
        return api.FetchPartition(rng.topic, rng.partition, pos,
                                  min(self.consumer.fetch_size, rng.end - pos))

    def _lost(self, pos: int) -> int:
        """Where to go on from ``pos`` after OFFSET_OUT_OF_RANGE (-1: nothing left)."""
        rng = self.rng
        (log_start,) = self.consumer.offsets_before(rng.topic, rng.partition, EARLIEST)
        what = (f"{rng.topic}/{rng.partition}: bytes [{pos}, {min(log_start, rng.end)}) of the "
                f"range [{rng.start}, {rng.end}) were deleted before they were read")
        if pos >= log_start:
            what = (f"{rng.topic}/{rng.partition}: offset {pos} is no longer in the log "
                    f"(the topic was deleted and created again?)")
        if self.fail_on_data_loss:
            raise DataLossError(what + " (failOnDataLoss is true)")
        log.warning("%s; going on from the log start %d (failOnDataLoss is false)", what,
                    log_start)
        return log_start if pos < log_start < self.rng.end else -1

    def _decode(self, columns: Columns, fetched: FetchedSet) -> int:
        """Append the messages of ``fetched`` up to the range end; the offset after them."""
        mark = len(columns)
        before = columns.value_bytes
        try:
            return decode_into(columns, fetched.message_set, fetched.offset, end=self.rng.end,
                               check_crc=self.check_crc, max_message_bytes=self.max_bytes,
                               max_inflated_bytes=self.max_bytes)
        except (InvalidMessageError, MessageTooLargeError):
            pass
        # Again message by message, for the consumer's own wording of the bad entry
        # (InvalidEntryError names topic, partition and offset) or skip.bad.messages.
        del columns.offsets[mark:], columns.next_offsets[mark:], columns.values[mark:]
        columns.value_bytes = before
        self.contiguous = False  # skip.bad.messages may leave a gap
        pos = fetched.offset
        for offset, _next, value in fetched:
            if offset >= self.rng.end:
                break
            columns.offsets.append(offset)
            columns.next_offsets.append(_next)
            columns.values.append(value)
            columns.value_bytes += len(value)
            pos = _next
        return max(pos, min(fetched.next_offset, self.rng.end))

    def batches(self) -> Iterator[pa.RecordBatch]:
        rng = self.rng
        topic = pa.scalar(rng.topic, pa.string())
        partition = pa.scalar(rng.partition, pa.int32())
        columns = Columns()
        pos = rng.start
        consumer = self.consumer
        part = self._part(pos) if pos < rng.end else None
        if part is not None:
            consumer.send_fetch((part,))
        while part is not None:
            try:
                (fetched,) = consumer.receive_fetch((part,))
            except OffsetOutOfRangeError:
                if len(columns):  # rows on both sides of a gap never share a batch
                    yield self._flush(topic, partition, columns, pos)
                    columns = Columns()
                pos = self._lost(part.offset)
                part = self._part(pos) if pos >= 0 else None
                if part is not None:
                    consumer.send_fetch((part,))
                continue
            if not fetched.entries:
                raise DataLossError(f"{rng.topic}/{rng.partition}: the log ends at "
                                    f"{fetched.log_end_offset}, before the range end {rng.end}")
            following = min(fetched.next_offset, rng.end)
            part = self._part(following) if following < rng.end else None
            if part is not None:
                consumer.send_fetch((part,))
            pos = self._decode(columns, fetched)
            if len(columns) >= BATCH_ROWS or columns.value_bytes >= BATCH_BYTES:
                yield self._flush(topic, partition, columns, pos)
                columns = Columns()
        if len(columns):
            yield self._flush(topic, partition, columns, pos)

    def _flush(self, topic: pa.Scalar, partition: pa.Scalar, columns: Columns,
               end: int) -> pa.RecordBatch:
        batch = _batch(topic, partition, columns, end, self.contiguous)
        self.contiguous = True
        return batch

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
