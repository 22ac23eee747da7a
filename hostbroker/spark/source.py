"""The ``hostbroker`` DataSource: schema, options, and the batch reader.

Spark builds a :class:`HostbrokerDataSource` from the options on the driver,
asks it for a reader or writer, pickles that to its Python workers and calls
``read`` / ``write`` there. Options are checked when the reader or writer is
made, on the driver, so a bad one fails the query before any job starts.
Planning (which partitions, which byte ranges) talks to the brokers on the
driver; each input partition is one byte range of one partition
(``hostbroker.spark.reading``), read into Arrow record batches by
``hostbroker.spark.arrow``. The streaming reader is ``hostbroker.spark.stream``'s. In cluster mode
(``zookeeper.connect``) the schema has a ``broker`` column after ``topic``
and an input partition is a range of one (broker, partition) pair
(``hostbroker.spark.cluster``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceStreamWriter, DataSourceWriter, InputPartition)
from pyspark.sql.types import StructType

from hostbroker.spark.cluster import make_planner
from hostbroker.spark.errors import shallow, shallow_iter
from hostbroker.spark.options import (FORMAT, ReadOptions, check_known, read_options,
                                      write_options)
from hostbroker.spark.reading import RangePartition, read_partition
from hostbroker.spark.stream import StreamReader

SCHEMA = "topic string, partition int, offset long, next_offset long, value binary"
CLUSTER_SCHEMA = ("topic string, broker int, partition int, offset long, next_offset long, "
                  "value binary")


class HostbrokerDataSource(DataSource):
    """Topics of hostbroker brokers as rows of :data:`SCHEMA` (docs/spark.md)."""

    @shallow
    def __init__(self, options):
        super().__init__(options)
        check_known(self.options)

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return CLUSTER_SCHEMA if "zookeeper.connect" in self._keys() else SCHEMA

    def _keys(self) -> set[str]:
        return {key.lower() for key in self.options}

    @shallow
    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options, streaming=False))

    @shallow
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(read_options(self.options, streaming=True))

    @shallow
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from hostbroker.spark.writer import BatchWriter

        return BatchWriter(write_options(self.options, streaming=False), schema, overwrite)

    @shallow
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from hostbroker.spark.writer import StreamWriter

        return StreamWriter(write_options(self.options, streaming=True), schema, overwrite)


class BatchReader(DataSourceReader):
    """Plans on the driver (one input partition per range), reads in the tasks."""

    def __init__(self, opts: ReadOptions):
        self.opts = opts

    @shallow
    def partitions(self) -> Sequence[InputPartition]:
        with make_planner(self.opts) as planner:
            return [RangePartition(rng) for rng in planner.plan()]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return shallow_iter(read_partition(partition, self.opts))
