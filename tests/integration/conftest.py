import pytest

from tests.integration.broker import Broker


@pytest.fixture
def make_broker(tmp_path):
    """Factory: ``make_broker(**settings)`` starts a broker; all are stopped after the test."""
    started: list[Broker] = []

    def make(root=None, start=True, **settings) -> Broker:
        broker = Broker(root or tmp_path, **settings)
        started.append(broker)
        return broker.start() if start else broker

    yield make
    for b in started:
        b.finish()  # a broker the test killed: nothing starts it again, its leftovers go


@pytest.fixture
def broker(make_broker):
    return make_broker()
