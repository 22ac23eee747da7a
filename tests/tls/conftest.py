import pytest

from tests.integration.broker import Broker
from tests.ports import free_port
from tests.tls.certs import Certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return Certs(str(tmp_path_factory.mktemp("certs")))


class TlsBroker(Broker):
    """A broker with ``tcp://``, ``unix://`` and ``ssl://`` listeners."""

    def __init__(self, root, certs: Certs, **settings):
        self.ssl_port = free_port()
        super().__init__(root, **{"ssl.keystore.location": certs.keystore("server"),
                                  "ssl.truststore.location": certs.ca, **settings})

    def _listeners(self) -> str:
        return super()._listeners() + f",ssl://127.0.0.1:{self.ssl_port}"

    @property
    def ssl(self) -> str:
        return f"ssl://127.0.0.1:{self.ssl_port}"


@pytest.fixture
def make_tls_broker(tmp_path, certs):
    started: list[Broker] = []

    def make(root=None, start=True, **settings) -> TlsBroker:
        broker = TlsBroker(root or tmp_path, certs, **settings)
        started.append(broker)
        return broker.start() if start else broker

    yield make
    for b in started:
        b.finish()


def module_tls_broker(**settings):
    """A module-scoped fixture: one TLS broker with ``settings`` for the tests of
    the module that change nothing broker-wide but their own topics."""

    @pytest.fixture(scope="module")
    def served(tmp_path_factory, certs):
        broker = TlsBroker(tmp_path_factory.mktemp("tls"), certs, **settings).start()
        yield broker
        broker.finish()

    return served
