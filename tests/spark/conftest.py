"""A real local SparkSession (one for the whole test session) and real brokers.

The session runs ``local[2]`` with its Python workers on this interpreter
(``hostbroker.spark.session``); its first query warms the JVM, so every test
module shares it. Brokers are ``hostbroker serve`` processes, as in
tests/integration.
"""

from __future__ import annotations

import os

import pytest

# Every JVM a test starts here (the session's and each ``hostbroker load`` run's, which
# inherit this process's environment) handles a few hundred messages for a minute at
# most: the client compiler alone and the serial collector start it and run the tests'
# queries with about 40 % less CPU than the server defaults (C2's compiler threads,
# G1's), which the tests on the other workers need more. Spark's launcher puts
# SPARK_SUBMIT_OPTS on the JVM's command line (silently, unlike JAVA_TOOL_OPTIONS).
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

from tests.integration.conftest import broker, make_broker  # noqa: F401 - fixtures


@pytest.fixture(scope="session")
def spark():
    from hostbroker.spark.session import spark_session

    session = spark_session("local[2]", app_name="hostbroker-tests",
                            conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()
