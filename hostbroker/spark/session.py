"""A SparkSession for hostbroker's own Spark jobs (the loader, the tests, the benchmarks).

Spark's driver binds to the host's name unless told otherwise, and its
Python workers run whatever ``python3`` is on the PATH; on one host both
must be this host's loopback address and this interpreter (the one that has
hostbroker installed). :func:`spark_session` sets ``SPARK_LOCAL_IP`` (when
unset) and ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` (when unset) before
the JVM starts, then builds the session with the ``hostbroker`` format
registered. On a cluster master the workers need hostbroker installed in the
Python that ``PYSPARK_PYTHON`` names there (docs/spark.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from hostbroker.spark import register

# The Spark UI and the shuffle defaults are for clusters; a one-host job needs neither.
_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
}


def spark_session(master: str = "local[*]", app_name: str = "hostbroker",
                  conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession on ``master`` with the ``hostbroker`` format registered.

    An active session in this process is reused (Spark allows one per JVM);
    its master is then whatever it was built with.
    """
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**_DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
