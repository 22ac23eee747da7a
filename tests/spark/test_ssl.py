"""The Spark source and sink over TLS: the ``ssl.*`` options (docs/spark.md,
"TLS"), checked on the driver and used by every connection of the job's
driver and tasks, against a broker whose only listener is ``ssl://`` and
requires a client certificate (nothing can reach it any other way)."""

from __future__ import annotations

import pytest

from hostbroker.client import SimpleConsumer
from hostbroker.spark.options import OptionError, read_options, write_options
from tests.tls.certs import Certs
from tests.tls.ssl_only import SslOnlyBroker


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def ssl_broker(tmp_path_factory, certs):
    broker = SslOnlyBroker(tmp_path_factory.mktemp("ssl-broker"), certs,
                           auto_create_topics_enable="false").start()
    yield broker
    broker.finish()


def test_a_batch_write_then_a_batch_read_through_ssl(spark, ssl_broker):
    with ssl_broker.client() as client:
        client.create_topic("secret", 2)
    options = {"bootstrap": ssl_broker.ssl, **ssl_broker.tls("alice")}
    values = [f"row {i}" for i in range(200)]
    df = spark.createDataFrame([(v,) for v in values], "value string").repartition(2)
    df.write.format("hostbroker").mode("append").options(topic="secret", **options).save()
    with SimpleConsumer(ssl_broker.ssl, ssl_broker.tls()) as consumer:
        written = sorted(v for p in range(2)
                         for _, _, v in consumer.messages("secret", p, 0, stop_at_end=True))
    assert written == sorted(v.encode() for v in values)

    read = spark.read.format("hostbroker").options(subscribe="secret", **options).load()
    assert sorted(bytes(r.value) for r in read.collect()) == written


def test_without_a_certificate_the_read_is_refused(spark, ssl_broker):
    """The broker requires one: a read given only the CA fails (at its planning
    on the driver, the first to connect) with the broker's refusal. Under TLS
    1.3 the client learns of it at its first read, as the broker's alert
    (certificate required) or, when the broker closed first, an EOF: either
    said as a broker it cannot reach, by its URI."""
    read = (spark.read.format("hostbroker")
            .options(bootstrap=ssl_broker.ssl, subscribe="secret",
                     **ssl_broker.tls(None)).load())
    with pytest.raises(Exception, match=r"cannot reach ssl://\S+: the broker"):
        read.collect()


def test_ssl_options_are_checked_on_the_driver_in_one_line(certs, tmp_path):
    base = {"bootstrap": "ssl://127.0.0.1:9093", "subscribe": "t"}
    opts = read_options({**base, **certs.client("alice")}, streaming=False)
    assert opts.client["ssl.keystore.location"] == certs.keystore("alice")
    assert write_options({"bootstrap": "ssl://127.0.0.1:9093", "topic": "t",
                          **certs.client("alice")}, streaming=False).client == certs.client(
        "alice")
    missing = str(tmp_path / "missing.pem")
    cases = {
        "ssl.truststore.location": missing,
        "ssl.keystore.location": certs.ca,  # a certificate without its key
        "ssl.endpoint.identification.algorithm": "none",
    }
    for key, value in cases.items():
        with pytest.raises(OptionError) as caught:
            read_options({**base, key: value}, streaming=True)
        said = str(caught.value)
        assert "\n" not in said and said.startswith(f"hostbroker data source: option {key}: ")
    # a wrong password for an encrypted key
    with pytest.raises(OptionError, match="option ssl.keystore.location: "):
        write_options({"bootstrap": base["bootstrap"], "topic": "t",
                       "ssl.keystore.location": certs.path("server.enc.keystore.pem"),
                       "ssl.key.password": "wrong"}, streaming=False)
    # one name each: not also as a client setting
    with pytest.raises(OptionError, match="use the option ssl.truststore.location"):
        read_options({**base, "hostbroker.ssl.truststore.location": certs.ca},
                     streaming=False)


def test_ssl_locations_must_be_absolute_paths(certs, monkeypatch):
    """The executors read the files too, from their own working directory."""
    monkeypatch.chdir(certs.dir)
    for key, name in (("ssl.truststore.location", "ca.pem"),
                      ("ssl.keystore.location", "alice.keystore.pem")):
        with pytest.raises(OptionError) as caught:
            read_options({"bootstrap": "ssl://127.0.0.1:9093", "subscribe": "t", key: name},
                         streaming=False)
        assert str(caught.value) == (f"hostbroker data source: option {key}: {name!r} must "
                                     "be an absolute path (the executors read it too, from "
                                     "their own working directory)")


def test_the_key_password_is_taken_as_given_and_never_shown(certs):
    from hostbroker.spark.loader import LoadJob
    from tests.tls.certs import PASSWORD

    base = {"bootstrap": "ssl://127.0.0.1:9093", "topic": "t",
            "ssl.keystore.location": certs.path("server.enc.keystore.pem")}
    with pytest.raises(OptionError, match="option ssl.keystore.location: "):
        write_options({**base, "ssl.key.password": f" {PASSWORD} "}, streaming=False)
    written = write_options({**base, "ssl.key.password": PASSWORD}, streaming=False)
    read = read_options({"bootstrap": base["bootstrap"], "subscribe": "t",
                         "ssl.keystore.location": base["ssl.keystore.location"],
                         "ssl.key.password": PASSWORD}, streaming=True)
    assert written.client["ssl.key.password"] == PASSWORD
    job = LoadJob("ssl://127.0.0.1:9093", "t", "/out", tls={"ssl.key.password": PASSWORD},
                  properties={"ssl.key.password": PASSWORD})
    for shown in (repr(written), repr(read), repr(job), str(read)):
        assert PASSWORD not in shown and "'ssl.key.password': '***'" in shown, shown
