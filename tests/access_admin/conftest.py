from tests.integration.conftest import broker, make_broker  # noqa: F401 - fixtures
