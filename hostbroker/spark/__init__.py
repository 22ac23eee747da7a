"""Topics as Spark DataFrames: the ``hostbroker`` data source and the loader.

``register(spark)`` makes the format ``hostbroker`` known to a SparkSession;
then ``spark.read``, ``spark.readStream``, ``df.write`` and ``df.writeStream``
take it (docs/spark.md). The package's parts:

- ``options``   the data source's options, checked before any job (pure)
- ``planning``  topics, partitions and offset ranges from the brokers, split
                into input partitions at entry boundaries
- ``cluster``   cluster mode (``zookeeper.connect``): planning over every live
                broker's (broker, partition) pairs, read from ZooKeeper on the driver
- ``arrow``     one range read into Arrow record batches
- ``reading``   one planned range as a Spark task's input, and its read
- ``source``    the DataSource and its batch reader
- ``stream``    the streaming reader (read limits, Trigger.AvailableNow)
- ``writer``    batch and streaming writers (Arrow in, the client's producer out)
- ``errors``    what those three raise, as Spark shows it: one frame, the reason first
- ``session``   a SparkSession set up for this host (local IP, worker Python)
- ``loader``    ``hostbroker load``: topics to files, exactly once

Only ``reading``, ``source``, ``stream``, ``writer`` and ``session`` import
pyspark; the rest runs without it.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Make the ``hostbroker`` format known to ``spark`` (a SparkSession)."""
    from hostbroker.spark.source import HostbrokerDataSource

    spark.dataSource.register(HostbrokerDataSource)
