"""One Spark task's input and its read, shared by the batch and the streaming reader.

The driver plans byte ranges (``hostbroker.spark.planning``, or
``hostbroker.spark.cluster`` in cluster mode) and wraps each in a
:class:`RangePartition`; Spark pickles it to a Python worker, where
:func:`read_partition` reads it into Arrow record batches
(``hostbroker.spark.arrow``). The batch reader (``hostbroker.spark.source``)
and the streaming reader (``hostbroker.spark.stream``) both hand their ranges
out this way; neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import InputPartition

from hostbroker.spark.arrow import read_range
from hostbroker.spark.options import ReadOptions
from hostbroker.spark.planning import Range


class RangePartition(InputPartition):
    """One Spark task's input: a planned :class:`~hostbroker.spark.planning.Range`."""

    def __init__(self, rng: Range):
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.name} [{r.start}, {r.end}))"


def read_partition(partition: InputPartition, opts: ReadOptions) -> Iterator[Any]:
    """The record batches of one planned range (runs in a Spark task)."""
    return read_range(partition.range, opts.client, opts.fail_on_data_loss)
