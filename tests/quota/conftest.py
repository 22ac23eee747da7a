"""Fixtures of the quota tests: the brokers of tests/integration."""

from tests.integration.conftest import make_broker  # noqa: F401 - fixture
