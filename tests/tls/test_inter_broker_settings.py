"""security.inter.broker.protocol: the settings SSL needs, refused in one line
(exit 78), the principal the other brokers see, and the start-time warning."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hostbroker.config import Config
from hostbroker.errors import ExitStatus
from hostbroker.security.requests import start_warnings
from hostbroker.workers.tls import TlsConfigError, check_inter_broker
from tests.ports import free_port
from tests.tls.certs import broker_certificate


def _config(**settings) -> Config:
    return Config.build(overrides=[f"{k}={v}" for k, v in settings.items()])


def _ssl(certs, **more) -> dict:
    return {"log.dirs": "/nonexistent", "security.inter.broker.protocol": "SSL",
            "listeners": "tcp://127.0.0.1:0,ssl://127.0.0.1:0",
            "ssl.keystore.location": broker_certificate(certs, "broker1"),
            "ssl.truststore.location": certs.ca, **more}


def test_plaintext_needs_nothing_and_a_bad_value_is_refused(certs):
    assert check_inter_broker(_config(**{"log.dirs": "/x"})) is None
    with pytest.raises(Exception, match="security.inter.broker.protocol.*PLAINTEXT, SSL"):
        _config(**{"log.dirs": "/x", "security.inter.broker.protocol": "SASL_SSL"})


def test_ssl_gives_the_principal_of_the_certificate(certs):
    assert check_inter_broker(_config(**_ssl(certs))) == "User:broker1"


@pytest.mark.parametrize("change, said", [
    ({"ssl.keystore.location": ""}, "ssl.keystore.location must be named"),
    ({"ssl.truststore.location": ""}, "ssl.truststore.location must be named"),
    ({"listeners": "tcp://127.0.0.1:0"}, "no ssl:// listener"),
    # no broker would ask for the certificate: each would be User:ANONYMOUS
    ({"ssl.client.auth": "none"}, "ssl.client.auth is none"),
    # registered without an ssl:// listener: no broker could reach this one
    ({"advertised.listeners": "tcp://h1:9092"}, "advertised.listeners has no ssl://"),
    # a certificate meant for servers only: the other brokers refuse it as a client's
    ({"ssl.keystore.location": "server"}, "not one the brokers take as a client"),
    ({"ssl.truststore.location": "otherca.pem"}, "not one the brokers take as a client"),
])
def test_ssl_without_what_it_needs_is_refused(certs, change, said):
    change = {k: (certs.keystore(v) if v == "server" else certs.path(v) if v.endswith(".pem")
                  else v) for k, v in change.items()}
    with pytest.raises(TlsConfigError, match=said) as e:
        check_inter_broker(_config(**_ssl(certs, **change)))
    assert "\n" not in str(e.value)


def test_the_check_shakes_hands_with_the_listeners_own_context(certs):
    # TLSv1.3 only, with a certificate good for both ends: taken
    assert check_inter_broker(_config(**_ssl(certs, **{
        "ssl.enabled.protocols": "TLSv1.3"}))) == "User:broker1"
    # requested (not required) is enough: the certificate is still asked for
    assert check_inter_broker(_config(**_ssl(certs, **{
        "ssl.client.auth": "requested"}))) == "User:broker1"


def test_the_brokers_client_context_follows_its_tls_policy(certs):
    import ssl

    from hostbroker.workers.tls import inter_broker_context

    ctx = inter_broker_context(_config(**_ssl(certs, **{"ssl.enabled.protocols": "TLSv1.3"})))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.options & ssl.OP_NO_RENEGOTIATION and ctx.options & ssl.OP_NO_COMPRESSION
    ctx = inter_broker_context(_config(**_ssl(certs, **{
        "ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256"})))
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-RSA-AES128-GCM-SHA256"]


def test_start_warns_of_a_certificate_without_the_registered_host_and_a_login_cn(certs):
    import getpass

    from hostbroker.workers.tls import inter_broker_warnings

    config = _config(**_ssl(certs, **{"advertised.listeners": "ssl://not-this.example:9093"}))
    (line,) = inter_broker_warnings(config, check_inter_broker(config))
    assert "does not name not-this.example" in line and "\n" not in line
    assert inter_broker_warnings(_config(**_ssl(certs)), None) == []
    # a CN that is a login name here: said at start
    login = getpass.getuser()
    config = _config(**_ssl(certs, **{"ssl.keystore.location": broker_certificate(certs, login),
                                      "ssl.endpoint.identification.algorithm": ""}))
    (line,) = inter_broker_warnings(config, check_inter_broker(config))
    assert f"User:{login} is also a login name" in line


def test_a_broker_refuses_to_start_in_one_line(tmp_path, certs):
    args = [sys.executable, "-m", "hostbroker", "serve", "--set", f"log.dirs={tmp_path}/logs",
            "--set", f"listeners=tcp://127.0.0.1:{free_port()}", "--set", "http.listeners=",
            "--set", "security.inter.broker.protocol=SSL",
            "--set", f"ssl.keystore.location={broker_certificate(certs, 'broker1')}",
            "--set", f"ssl.truststore.location={certs.ca}"]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == ExitStatus.REFUSED, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no ssl:// listener" in lines[0], done.stderr


def test_the_warning_names_the_principal_only_when_it_is_not_a_super_user(certs):
    cluster = {"authorizer.enable": "true", "zookeeper.connect": "127.0.0.1:2181",
               "listeners": "unix:///tmp/x.sock,ssl://127.0.0.1:0"}
    (line,) = start_warnings(_config(**_ssl(certs, **cluster)), "User:broker1")
    assert "User:broker1" in line and "super.users" in line and "ANONYMOUS" not in line
    assert start_warnings(_config(**_ssl(certs, **cluster, **{
        "super.users": "User:root;User:broker1"})), "User:broker1") == []
    (plain,) = start_warnings(_config(**{**_ssl(certs, **cluster),
                                         "security.inter.broker.protocol": "PLAINTEXT"}))
    assert "User:ANONYMOUS" in plain


def test_leader_and_isr_names_every_listener_of_the_leaders():
    from hostbroker.cluster import controller as ctl
    from hostbroker.cluster import paths
    from hostbroker.protocol import replication as rp
    from hostbroker.workers.registrar_controller import request_of

    leader = paths.BrokerInfo(1, "h1", 9092, "/run/1.sock", "h1s", 9093)
    plain_only = paths.BrokerInfo(2, "h2", 9092, None)
    notice = ctl.Notice(ctl.LEADER_AND_ISR, 3, 7, leaders={1: leader, 2: plain_only})
    request = request_of(notice, 1)
    assert request.API_VERSION == 1
    expected = [(1, "h1", 9092, "/run/1.sock", "h1s", 9093), (2, "h2", 9092, None, None, -1)]
    assert [(b.broker_id, b.host, b.port, b.unix_path, b.ssl_host, b.ssl_port)
            for b in request.brokers] == expected
    # the wire round trip, bounded and checked as it is read
    _, back = rp.decode_request(rp.encode_request(request, 5, "c")[4:])
    assert [(b.broker_id, b.host, b.port, b.unix_path, b.ssl_host, b.ssl_port)
            for b in back.brokers] == expected
    bad = rp.LeaderAndIsrRequestV1(1, 3, (), (), (rp.BrokerEndpoints(2, "h", 1, None, "s", 70000),))
    with pytest.raises(Exception, match="ssl port 70000"):
        rp.decode_request(rp.encode_request(bad, 5, "c")[4:])
