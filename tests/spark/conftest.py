"""A real local SparkSession (one for the whole test session) and real brokers.

The session runs ``local[2]`` with its Python workers on this interpreter
(``hostbroker.spark.session``); its first query warms the JVM, so every test
module shares it. Brokers are ``hostbroker serve`` processes, as in
tests/integration.
"""

from __future__ import annotations

import pytest

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
