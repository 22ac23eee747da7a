"""The ``hostbroker`` data source's writers: DataFrame rows in, messages in topics out.

:class:`BatchWriter` (``df.write``) and :class:`StreamWriter`
(``df.writeStream``, once per micro-batch) check the DataFrame's columns on
the driver, when Spark asks the data source for a writer, so a bad column
fails the query before any job. The columns (matched without regard to case):

- ``value``: binary or string, required; a null value fails the task (the
  log has no null message);
- ``topic``: string, optional; the ``topic`` option, when given, overrides
  it for every row (as in Spark's Kafka sink); a row without either fails;
- ``partition``: an integer type, optional; the partition index the row goes
  to (null: the key or the partitioner chooses);
- ``key``: binary or string, optional; only chooses the partition,
  ``stable_hash(key) % partitions`` as the client's DefaultPartitioner does,
  and is not stored.

Each Spark task runs ``write`` on an executor with one
:class:`~hostbroker.client.producer.Producer` (:func:`producer_config`): every
Arrow record batch is cut into runs of one (topic, partition) and each run is
handed to ``send_many`` (keyless rows of a topic in one call too, the
producer's sticky partition choosing). The producer sends in its own thread
while the task converts the next batch; the task ends with a flush, so it
returns only once every message is acknowledged, and a message that is not
fails the task with the broker's error, naming topic and partition. What was
acknowledged before stays in the log (at least once). The task's commit
message counts messages and log bytes per (topic, partition), taken from the
producer's own acknowledgements (with acks=0, from what was sent).

Cluster mode (``zookeeper.connect``): each task's producer finds the brokers
through ZooKeeper (``Producer(zookeeper_connect=...)``) and spreads rows over
the topic's sorted (broker, partition) pairs. A ``partition`` column is
refused there: the producer takes a partition as an index into that list,
which changes as brokers come and go between the row and its send. Keyed
rows are handed to the producer with their key (one ``send_many`` per key
and run), so it hashes them into the list it sends with. The driver checks,
before any job, that ZooKeeper answers and names a live broker.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import (BinaryType, ByteType, IntegerType, LongType, ShortType,
                               StringType, StructType)

from hostbroker.client.cluster import Cluster
from hostbroker.client.errors import DeliveryError, ProducerError
from hostbroker.client.producer import Producer, ProducerCallbacks
from hostbroker.errors import ConfigError, ErrorCode
from hostbroker.spark.errors import shallow
from hostbroker.spark.options import OptionError, WriteOptions

log = logging.getLogger(__name__)

PREFIX = "hostbroker data source: "
_BYTES = (BinaryType, StringType)
_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
# Column -> (accepted Spark types, how a wrong type is described).
COLUMNS = {
    "value": (_BYTES, "binary or string"),
    "topic": ((StringType,), "string"),
    "partition": (_INTEGERS, "an integer type"),
    "key": (_BYTES, "binary or string"),
}


class WriteError(RuntimeError):
    """A write task could not deliver its rows; the message says where and why."""


def _column_error(name: str, problem: str) -> OptionError:
    return OptionError(f"{PREFIX}column {name}: {problem}")


def check_columns(schema: StructType, opts: WriteOptions) -> dict[str, str]:
    """The DataFrame's column name for each of COLUMNS it has, checked; raises OptionError."""
    found: dict[str, str] = {}
    for f in schema.fields:
        name = f.name.lower()
        if name not in COLUMNS:
            raise _column_error(f.name, "not a column this sink takes (it takes value, and "
                                "optionally topic, partition and key); select or drop columns "
                                "first")
        if name in found:
            raise _column_error(f.name, f"given twice ({found[name]} and {f.name})")
        types, described = COLUMNS[name]
        if not isinstance(f.dataType, types):
            raise _column_error(f.name, f"must be {described}, not {f.dataType.simpleString()}")
        found[name] = f.name
    if "value" not in found:
        raise _column_error("value", "required: the messages, binary or string")
    if "partition" in found and opts.cluster:
        raise _column_error(found["partition"], "not taken with zookeeper.connect: a cluster's "
                            "partitions are (broker, partition) pairs that change as brokers "
                            "come and go; leave the choice to the key or the producer")
    if "topic" not in found and opts.topic is None:
        raise OptionError(f"{PREFIX}option topic: required when the data has no topic column")
    return found


# Async producer defaults: one batch is Spark's Arrow batch (10,000 rows by default),
# and the queue holds two, so that a task holds a few batches of values at most (the
# one it converts, two queued, what the sending thread took).
BATCH_SIZE = 10_000


def producer_config(opts: WriteOptions) -> dict:
    """The dotted producer settings of a write task: the ``hostbroker.*`` client
    settings of the options over this source's defaults, and the settings it owns."""
    config = {"batch.size": BATCH_SIZE, **opts.client}
    config.setdefault("queue.size", 2 * config["batch.size"])
    config.update({"producer.type": "async", "compression.codec": opts.compression,
                   "request.required.acks": opts.acks})
    if opts.cluster:
        config.update({"zookeeper.connect": opts.zookeeper,
                       "zookeeper.connection.timeout.ms": opts.zookeeper_timeout_ms})
    return config


def check_producer(opts: WriteOptions) -> dict[str, int] | None:
    """Fail on the driver for settings the producer refuses together (batch.size over
    queue.size, max.request.bytes under message.max.bytes), with no I/O; in cluster
    mode, also for a ZooKeeper that does not answer or names no live broker, and
    return the live brokers' ids by URI."""
    config = dict(producer_config(opts), **{"producer.type": "sync"})
    config.pop("zookeeper.connect", None)
    config.pop("zookeeper.connection.timeout.ms", None)
    try:
        # Standalone settings check the same: a producer is only made here, never used.
        Producer(opts.bootstrap or ("tcp://127.0.0.1:9092",), config).close()
    except ConfigError as exc:
        key = str(exc).split(":", 1)[0]
        raise OptionError(f"{PREFIX}option hostbroker.{key}: {str(exc).split(': ', 1)[-1]}"
                          ) from None
    if opts.cluster:
        from hostbroker.spark.cluster import live_snapshot

        snapshot = live_snapshot(opts.zookeeper, opts.zookeeper_timeout_ms)
        return {uri: broker for broker, info in snapshot.brokers.items() for uri in info.uris()}
    return None


def check_mode(overwrite: bool, streaming: bool) -> None:
    if overwrite:
        mode = "outputMode append or update" if streaming else "mode append"
        raise OptionError(f"{PREFIX}a topic is only appended to: use {mode}")


@dataclass
class WriteSummary(WriterCommitMessage):
    """What one task wrote: ``counts[(topic, partition)] = [messages, log bytes]``.

    ``acknowledged`` is False with acks=0, where the counts are what was sent.
    """

    counts: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    acknowledged: bool = True

    @property
    def messages(self) -> int:
        return sum(c[0] for c in self.counts.values())

    @property
    def bytes(self) -> int:
        return sum(c[1] for c in self.counts.values())


def merge(summaries) -> WriteSummary:
    """One summary of the tasks' (None for a task that failed)."""
    total = WriteSummary()
    for s in summaries:
        if s is None:
            continue
        total.acknowledged = total.acknowledged and s.acknowledged
        for where, (messages, size) in s.counts.items():
            counts = total.counts.setdefault(where, [0, 0])
            counts[0] += messages
            counts[1] += size
    return total


def describe(summary: WriteSummary) -> str:
    """``N messages (B bytes): t/0 n, t/1 n`` for a log line."""
    verb = "acknowledged" if summary.acknowledged else "sent (acks=0: not acknowledged)"
    parts = ", ".join(f"{t}/{p} {c[0]}" for (t, p), c in sorted(summary.counts.items()))
    return (f"{summary.messages} message{'' if summary.messages == 1 else 's'} "
            f"({summary.bytes} byte{'' if summary.bytes == 1 else 's'}) {verb}"
            + (f": {parts}" if parts else ""))


class _Tally(ProducerCallbacks):
    """Counts messages and bytes per (topic, partition) as the producer reports them; in
    cluster mode per (topic, "BROKER-PARTITION"), the broker known by the URI it was
    sent to (``brokers``; the URI itself for a broker that joined since)."""

    def __init__(self, acks: int, brokers: Mapping[str, int] | None = None):
        self.summary = WriteSummary(acknowledged=acks != 0)
        self._acks = acks
        self._brokers = brokers

    def snapshot(self) -> WriteSummary:
        """A copy safe to read while the sending thread adds to the counts."""
        return WriteSummary({k: list(v) for k, v in dict(self.summary.counts).items()},
                            self.summary.acknowledged)

    def _add(self, partitions, uri: str) -> None:
        counts = self.summary.counts
        brokers = self._brokers
        for topic, partition, messages, size in partitions:
            if brokers is not None:
                partition = f"{brokers.get(uri, uri)}-{partition}"
            c = counts.setdefault((topic, partition), [0, 0])
            c[0] += messages
            c[1] += size

    def on_sent(self, request) -> None:
        if self._acks == 0:
            self._add(request.partitions, request.broker)

    def on_acknowledged(self, request, results) -> None:
        ok = {(r.topic, r.partition) for r in results if r.error_code == ErrorCode.NONE}
        self._add((p for p in request.partitions if (p[0], p[1]) in ok), request.broker)


def _as_bytes(array: pa.Array) -> pa.Array:
    """A string column as the binary column of its UTF-8 bytes (no copy); binary as is."""
    if pa.types.is_string(array.type):
        return array.cast(pa.binary())
    if pa.types.is_large_string(array.type):
        return array.cast(pa.large_binary())
    return array


def _first_null(array: pa.Array) -> int:
    return pc.index(array.is_null(), True).as_py()


def _task_partition() -> int | None:
    from pyspark import TaskContext

    context = TaskContext.get()
    return None if context is None else context.partitionId()


class _Task:
    """One task's producer, and where its rows go."""

    def __init__(self, opts: WriteOptions, columns: Mapping[str, str],
                 brokers: Mapping[str, int] | None = None):
        self.opts = opts
        self.columns = columns
        self.tally = _Tally(opts.acks, brokers)
        self.producer = Producer(opts.bootstrap or None, producer_config(opts),
                                 callbacks=self.tally)
        self._cluster: Cluster | None = None
        self._counts: dict[str, int] = {}  # topic -> partitions, asked once a task
        self.rows = 0  # rows of this task before the current batch
        self._spark_partition = _task_partition()

    def finish(self) -> None:
        """Wait until every message is acknowledged; raise WriteError for what was not."""
        try:
            self.producer.close()
        except DeliveryError as exc:
            first = exc.failures[0] if exc.failures else None
            if first is None:
                raise self._failed("a topic", str(exc), exc.message_count) from exc
            where = first.topic if first.partition is None else f"{first.topic}/{first.partition}"
            raise self._failed(where, str(first.error), exc.message_count) from exc
        except ProducerError as exc:
            raise self._failed("the brokers", str(exc), None) from exc
        finally:
            if self._cluster is not None:
                self._cluster.close()

    def abandon(self) -> None:
        """After a failure: send what is queued (the log keeps it either way), then stop."""
        try:
            self.finish()
        except Exception:  # noqa: BLE001 - the error that stopped the task says more
            pass

    def _failed(self, where: str, reason: str, lost: int | None) -> WriteError:
        """The reason first (a connection's names the broker), then what it cost."""
        count = "" if lost is None else f"{lost} message{'' if lost == 1 else 's'} not delivered; "
        return WriteError(f"{PREFIX}write to {where} failed: {reason} ({count}this task had "
                          f"{describe(self.tally.snapshot())}, which stay in the log: delivery "
                          f"is at least once)")

    def _where(self, row: int) -> str:
        where = f"row {self.rows + row}"
        if self._spark_partition is not None:
            where += f" of input partition {self._spark_partition}"
        return where

    def _no_nulls(self, array: pa.Array, name: str, why: str) -> None:
        if array.null_count:
            raise WriteError(f"{PREFIX}column {name}: null in {self._where(_first_null(array))}"
                             f" ({why})")

    def _partitions(self, topic: str) -> int:
        """``topic``'s number of partitions, as the producer's partitioner would see it."""
        n = self._counts.get(topic)
        if n is None:
            if self._cluster is None:
                settings = self.producer.settings
                self._cluster = Cluster(
                    self.producer.brokers, client_id=settings["client.id"],
                    timeout=settings["request.timeout.ms"] / 1000,
                    refresh_interval_ms=settings["topic.metadata.refresh.interval.ms"])
            try:
                n = self._counts[topic] = len(self._cluster.partitions(topic).partitions)
            except Exception as exc:  # noqa: BLE001 - no broker answered METADATA
                raise WriteError(f"{PREFIX}the partitions of {topic} (to place keyed rows): "
                                 f"no broker answered: {exc}") from exc
        return n

    def produce(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        for (topic, partition), values in self._runs(batch):
            self._send(topic, partition, values)
        self.rows += batch.num_rows

    def _runs(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[str, int | None], list]]:
        """``((topic, partition or None), values)`` runs of the batch, rows in order."""
        cols = self.columns
        values = _as_bytes(batch.column(cols["value"]))
        self._no_nulls(values, cols["value"], "the log has no null message")
        values = values.to_pylist()
        topic = self.opts.topic
        topics = None
        if topic is None:
            column = batch.column(cols["topic"])
            self._no_nulls(column, cols["topic"], "and no topic option")
            if pc.count_distinct(column).as_py() == 1:
                topic = column[0].as_py()
            else:
                topics = column.to_pylist()
        if self.opts.cluster:
            yield from self._keyed_runs(batch, values, topic, topics)
            return
        slots = self._slots(batch, topic, topics)
        if slots is None and topics is None:
            yield (topic, None), values
            return
        runs: dict[tuple[str, int | None], list] = {}
        if topics is None:
            for slot, value in zip(slots, values):
                run = runs.get((topic, slot))
                if run is None:
                    run = runs[(topic, slot)] = []
                run.append(value)
        else:
            slots = slots or [None] * len(values)
            for where, value in zip(zip(topics, slots), values):
                run = runs.get(where)
                if run is None:
                    run = runs[where] = []
                run.append(value)
        yield from runs.items()

    def _keyed_runs(self, batch: pa.RecordBatch, values: list, topic: str | None,
                    topics: list[str] | None) -> Iterator[tuple[tuple[str, bytes | None], list]]:
        """Cluster mode: ``((topic, key or None), values)`` runs, rows in order per key."""
        keys = None
        if "key" in self.columns:
            column = _as_bytes(batch.column(self.columns["key"]))
            if column.null_count < len(column):
                keys = column.to_pylist()
        if keys is None and topics is None:
            yield (topic, None), values
            return
        runs: dict[tuple[str, bytes | None], list] = {}
        for i, value in enumerate(values):
            where = (topic if topics is None else topics[i], None if keys is None else keys[i])
            run = runs.get(where)
            if run is None:
                run = runs[where] = []
            run.append(value)
        yield from runs.items()

    def _slots(self, batch: pa.RecordBatch, topic: str | None,
               topics: list[str] | None) -> list[int | None] | None:
        """Each row's partition index (None: the partitioner's choice); None: no row has one."""
        cols = self.columns
        slots = None
        if "partition" in cols:
            column = batch.column(cols["partition"])
            if column.null_count < len(column):
                low = pc.min(column).as_py()
                if low < 0:
                    first = pc.index(column, low).as_py()
                    raise WriteError(f"{PREFIX}column {cols['partition']}: {low} in "
                                     f"{self._where(first)} is not a partition")
                slots = column.to_pylist()
        if "key" not in cols:
            return slots
        keys = _as_bytes(batch.column(cols["key"]))
        if keys.null_count == len(keys):
            return slots
        keys = keys.to_pylist()
        crc32 = zlib.crc32
        if slots is None:
            slots = [None] * len(keys)
        if topics is None:
            n = self._partitions(topic)
            return [s if s is not None or k is None else crc32(k) % n
                    for s, k in zip(slots, keys)]
        return [s if s is not None or k is None else crc32(k) % self._partitions(t)
                for s, k, t in zip(slots, keys, topics)]

    def _send(self, topic: str, partition: int | bytes | None, values: list) -> None:
        """``partition``: an index, or in cluster mode the rows' key (bytes)."""
        try:
            if isinstance(partition, bytes):
                self.producer.send_many(topic, values, key=partition)
            else:
                self.producer.send_many(topic, values, partition=partition)
        except Exception as exc:
            self.abandon()
            where = f"{topic}/{partition}" if isinstance(partition, int) else topic
            if isinstance(exc, DeliveryError) and exc.failures:
                raise self._failed(where, str(exc.failures[0].error), exc.message_count) from exc
            raise self._failed(where, str(exc), None) from exc


class _Writer:
    """What the batch and the stream writer share: the checks and ``write``."""

    @shallow
    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool,
                 streaming: bool):
        check_mode(overwrite, streaming)
        self.columns = check_columns(schema, opts)
        self.brokers = check_producer(opts)
        self.opts = opts

    @shallow
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        task = _Task(self.opts, self.columns, self.brokers)
        try:
            for batch in iterator:
                task.produce(batch)
        except BaseException:
            task.abandon()
            raise
        task.finish()
        return task.tally.summary


class BatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("hostbroker")``: every row appended, at least once."""

    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool):
        super().__init__(opts, schema, overwrite, streaming=False)

    def commit(self, messages) -> None:
        log.info("%swrite committed: %s", PREFIX, describe(merge(messages)))

    def abort(self, messages) -> None:
        log.warning("%swrite aborted; the tasks that ended had %s (they stay in the log)",
                    PREFIX, describe(merge(messages)))


class StreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("hostbroker")``: each micro-batch as a batch write;
    a micro-batch replayed after a failure is produced again (at least once)."""

    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool):
        super().__init__(opts, schema, overwrite, streaming=True)

    def commit(self, messages, batchId: int) -> None:
        log.info("%smicro-batch %d committed: %s", PREFIX, batchId, describe(merge(messages)))

    def abort(self, messages, batchId: int) -> None:
        log.warning("%smicro-batch %d aborted; the tasks that ended had %s (they stay in the "
                    "log; the batch is produced again when the query restarts)",
                    PREFIX, batchId, describe(merge(messages)))
