"""The ``hostbroker`` DataSource: schema, options, and the batch reader.

Spark builds a :class:`HostbrokerDataSource` from the options on the driver,
asks it for a reader or writer, pickles that to its Python workers and calls
``read`` / ``write`` there. Options are checked when the reader or writer is
made, on the driver, so a bad one fails the query before any job starts.
Planning (which partitions, which byte ranges) talks to the brokers on the
driver; each input partition is one byte range of one partition, read into
Arrow record batches by ``hostbroker.spark.arrow``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceStreamWriter, DataSourceWriter, InputPartition)
from pyspark.sql.types import StructType

from hostbroker.spark import FORMAT
from hostbroker.spark.options import check_known, read_options, write_options

SCHEMA = "topic string, partition int, offset long, next_offset long, value binary"


class HostbrokerDataSource(DataSource):
    """Topics of hostbroker brokers as rows of :data:`SCHEMA` (docs/spark.md)."""

    def __init__(self, options):
        super().__init__(options)
        check_known(self.options)

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from hostbroker.spark.stream import StreamReader

        return StreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from hostbroker.spark.writer import BatchWriter

        return BatchWriter(write_options(self.options, streaming=False), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from hostbroker.spark.writer import StreamWriter

        return StreamWriter(write_options(self.options, streaming=True), schema, overwrite)


class BatchReader(DataSourceReader):
    """Reads the ranges planned on the driver; one Spark task per range."""

    def __init__(self, opts):
        self.opts = opts
        self._ranges = None

    def partitions(self) -> Sequence[InputPartition]:
        raise NotImplementedError

    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise NotImplementedError
