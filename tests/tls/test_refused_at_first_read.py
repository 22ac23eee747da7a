"""A broker that refuses the client's certificate (none given, or one of a CA
it does not trust): under TLS 1.3 the client's handshake has ended before
the broker checked it, and the refusal (an alert, or the broker closing)
comes at the client's first read. The client says so as it says any other
failure to connect: an OSError of one line, ``cannot reach URI: ...``,
never a bare ``ssl.SSLError`` without the broker's name."""

from __future__ import annotations

import ssl

import pytest

from hostbroker.client.connection import BrokerConnection
from hostbroker.client.simple import SimpleClient
from hostbroker.protocol import api
from tests.integration.cli import hostbroker, one_line_error
from tests.tls.ssl_only import SslOnlyBroker


@pytest.fixture(scope="module")
def broker(tmp_path_factory, certs):
    started = SslOnlyBroker(tmp_path_factory.mktemp("refusing"), certs).start()
    try:
        yield started
    finally:
        started.finish()


def refusal(broker, tls: dict) -> OSError:
    with pytest.raises(OSError) as caught:
        with SimpleClient(broker.ssl, tls=tls, timeout=10) as client:
            client.metadata()
    return caught.value


@pytest.mark.parametrize("name", [None, "mallory"])
def test_a_refused_certificate_is_a_failure_to_reach_the_broker(broker, certs, name):
    e = refusal(broker, certs.client(name))
    assert not isinstance(e, ssl.SSLError), repr(e)
    said = str(e)
    assert said.startswith(f"cannot reach {broker.ssl}: "), said
    assert "\n" not in said
    # (TLS 1.2, or a broker quick to refuse, says it in the handshake)
    assert "the broker" in said or "TLS handshake failed" in said, said


def test_under_tls_1_3_it_comes_at_the_first_read(broker, certs):
    """The handshake succeeds from the client's side; the first request (its
    answer, or its send when the broker closed quickly) is where the refusal
    shows, with the broker's name."""
    connection = BrokerConnection(broker.ssl, tls=certs.client(None), timeout=10)
    connection.connect()
    try:
        assert connection._sock.version() == "TLSv1.3"
        with pytest.raises(OSError) as caught:
            connection.send(api.MetadataRequest(()))
            connection.receive()
        assert type(caught.value) is OSError
        said = str(caught.value)
        assert said.startswith(f"cannot reach {broker.ssl}: the broker"), said
        assert "certificate required" in said or "closed the TLS connection" in said, said
        assert not connection.connected
    finally:
        connection.close()


def test_a_command_without_its_certificate_says_it_in_one_line(broker, tmp_path, certs):
    config = tmp_path / "ca-only.properties"
    config.write_text(f"ssl.truststore.location={certs.ca}\n")
    said = one_line_error(hostbroker("topics", "list", "--bootstrap", broker.ssl,
                                     "--command-config", str(config)))
    assert f"cannot reach {broker.ssl}: " in said, said


def test_the_certificate_it_trusts_still_reaches_it(broker):
    with broker.client() as client:
        client.metadata()
