"""hb-http of a broker whose only Kafka listener is ssl://: it reaches the
broker with the broker's own certificate, says so at start, and serves the
console's changes and /metrics."""

from __future__ import annotations

import http.client

from hostbroker.client.simple import SimpleClient
from tests.console.web import ConsoleBroker, call
from tests.ports import free_port
from tests.tls.certs import broker_certificate


class SslOnlyConsoleBroker(ConsoleBroker):
    """A console broker listening on ``ssl://`` alone."""

    def __init__(self, root, certs, **settings):
        self.ssl_port = free_port()
        self.certs = certs
        super().__init__(root, **{"ssl.keystore.location": broker_certificate(certs, "broker1"),
                                  "ssl.truststore.location": certs.ca, **settings})
        self.settings["listeners"] = f"ssl://127.0.0.1:{self.ssl_port}"
        self._may_move = False

    @property
    def ssl(self) -> str:
        return f"ssl://127.0.0.1:{self.ssl_port}"

    def client(self, uri=None, **kw) -> SimpleClient:
        return SimpleClient(uri or self.ssl, tls=self.certs.client("broker1"), **kw)

    def _answers(self) -> None:
        with self.client() as c:  # (its one listener)
            c.metadata()


def test_hb_http_over_an_ssl_listener(tmp_path, certs):
    broker = SslOnlyConsoleBroker(tmp_path, certs, **{"authorizer.enable": "true",
                                                      "super.users": "User:broker1;User:admin"})
    try:
        broker.start()
        log = broker.log()
        assert (f"hostbroker: hb-http reaches the broker at {broker.ssl} as User:broker1"
                in log), log
        assert "User:ANONYMOUS" not in log
        status, _, body = broker.post("/api/topics", {"topic": "made", "partitions": 2})
        assert status == 201, body
        with broker.client() as c:
            (topic,) = c.metadata(["made"]).topics
            assert sorted(p.partition for p in topic.partitions) == [0, 1]
        status, _, topics = call(broker, "GET", "/api/topics")
        assert status == 200 and "made" in str(topics)
        connection = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=20)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            text = response.read().decode()
        finally:
            connection.close()
        assert response.status == 200 and "hostbroker_" in text
    finally:
        broker.finish()


def test_hb_http_with_a_certificate_the_broker_refuses_says_so(tmp_path, certs):
    # the server-only certificate: the broker refuses it as a client's
    broker = SslOnlyConsoleBroker(tmp_path, certs, **{
        "ssl.keystore.location": certs.keystore("server")})
    try:
        broker.start()
        assert "hb-http reaches the broker at ssl://" in broker.log()
        assert "which will refuse it" in broker.log()
        status, _, _ = broker.post("/api/topics", {"topic": "never", "partitions": 1})
        assert status >= 500
    finally:
        broker.finish()


def test_hb_http_without_a_truststore_trusts_its_own_brokers_certificate(tmp_path, certs):
    # ssl.client.auth none and no truststore: hb-http is User:ANONYMOUS, says so,
    # and reaches its broker by trusting the broker's own certificate chain
    broker = SslOnlyConsoleBroker(tmp_path, certs, **{
        "ssl.truststore.location": "", "ssl.client.auth": "none"})
    try:
        broker.start()
        log = broker.log()
        assert f"hb-http reaches the broker at {broker.ssl} as User:ANONYMOUS" in log, log
        status, _, _ = broker.post("/api/topics", {"topic": "made", "partitions": 1})
        assert status == 201
        status, _, topics = call(broker, "GET", "/api/topics")
        assert status == 200 and "made" in str(topics)
    finally:
        broker.finish()
