"""A broker registration's ``endpoints`` list (Kafka's, with the ``ssl://``
listener), read back, and hostile values refused in one line."""

from __future__ import annotations

import json
import re
import socket

import pytest

from hostbroker.cluster import paths
from hostbroker.cluster.registry import advertised_info


def _node(**fields) -> bytes:
    return json.dumps({"version": 1, "host": None, "port": None, "unix": None,
                       **fields}).encode()


def test_registration_names_every_listener_and_round_trips():
    info = paths.BrokerInfo(3, "h1", 9092, "/run/hb.sock", "h1", 9093)
    data = paths.encode_broker(info)
    value = json.loads(data)
    assert value["endpoints"] == ["PLAINTEXT://h1:9092", "SSL://h1:9093"]
    assert (value["host"], value["port"], value["unix"]) == ("h1", 9092, "/run/hb.sock")
    assert paths.decode_broker(3, data) == info
    assert info.uris() == ["unix:///run/hb.sock", "tcp://h1:9092", "ssl://h1:9093"]


def test_an_ssl_only_broker_and_an_ipv6_one():
    info = paths.BrokerInfo(1, None, None, None, "::1", 9093)
    data = paths.encode_broker(info)
    assert json.loads(data)["endpoints"] == ["SSL://[::1]:9093"]
    assert paths.decode_broker(1, data) == info
    assert info.uris() == ["ssl://[::1]:9093"]
    assert paths.BrokerInfo(1, "::1", 9092, None).uris() == ["tcp://[::1]:9092"]


def test_an_ipv6_uri_of_a_registration_and_of_a_metadata_broker_connects():
    from hostbroker.client.connection import parse_uri
    from hostbroker.client.leaders import broker_uri
    from hostbroker.protocol.bodies import MetadataBroker

    try:
        server = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback on this host")
    with server:
        port = server.getsockname()[1]
        for uri in (paths.BrokerInfo(1, "::1", port, None).uris()[0],
                    broker_uri(MetadataBroker(1, "::1", port, None), False),
                    broker_uri(MetadataBroker(1, "::1", port, None), False, "ssl://[::1]:1")):
            family, address = parse_uri(uri)
            with socket.socket(family) as sock:
                sock.settimeout(5)
                sock.connect(address)  # (refused or unreachable: the test fails)


def test_an_old_node_without_endpoints_reads_as_before():
    old = b'{"version":1,"host":"h","port":9092,"unix":null}'
    assert paths.decode_broker(2, old) == paths.BrokerInfo(2, "h", 9092, None)
    # a broker without TLS keeps host/port/unix and adds its PLAINTEXT endpoint
    assert paths.encode_broker(paths.BrokerInfo(2, "h", 9092, None)) == \
        b'{"version":1,"host":"h","port":9092,"unix":null,"endpoints":["PLAINTEXT://h:9092"]}'


def test_ip_literals_and_ldh_names_are_taken():
    node = _node(endpoints=["PLAINTEXT://10.0.0.1:9092", "SSL://[fe80::1]:9093"])
    assert paths.decode_broker(4, node) == paths.BrokerInfo(4, "10.0.0.1", 9092, None,
                                                             "fe80::1", 9093)
    name = ".".join(["a" * 63] * 3) + ".b-1"
    node = _node(endpoints=[f"SSL://{name}:9093"])
    assert paths.decode_broker(4, node).ssl_host == name


def test_kafka_style_node_naming_plaintext_only_in_endpoints():
    node = _node(endpoints=["PLAINTEXT://k1:9092", "SASL_SSL://k1:9094", "SSL://k1:9093"])
    assert paths.decode_broker(4, node) == paths.BrokerInfo(4, "k1", 9092, None, "k1", 9093)


@pytest.mark.parametrize("endpoints, what", [
    ("SSL://h:1", "endpoints is not a list"),
    ([f"SSL://h:{i + 1}" for i in range(paths.MAX_ENDPOINTS + 1)], "endpoints is not a list"),
    ([7], "endpoint '7' is not PROTOCOL://host:port"),
    (["SSL:/h:1"], "is not PROTOCOL://host:port"),
    (["GOPHER://h:1"], "is not PROTOCOL://host:port"),
    (["SSL://h"], "is not PROTOCOL://host:port"),
    (["SSL://h:x1"], "is not PROTOCOL://host:port"),
    (["SSL://h:123456"], "is not PROTOCOL://host:port"),
    (["SSL://h:0"], "0 is not a port number"),
    (["SSL://h:70000"], "70000 is not a port number"),
    (["SSL://a/b:1"], "'a/b' is not a host name"),
    (["SSL://a b:1"], "'a b' is not a host name"),
    (["SSL://:1"], "'' is not a host name"),
    (["SSL://" + "h" * 300 + ":1"], "is not PROTOCOL://host:port"),
    (["SSL://\u0007:1"], "is not a host name"),
    (["SSL://a..b:9093"], "not an IP address or a host name"),
    (["SSL://a:b:9093"], "an IPv6 address goes in brackets"),
    (["SSL://::1:9093"], "an IPv6 address goes in brackets"),
    (["SSL://[h]:9093"], "in brackets but not an IPv6 address"),
    (["SSL://h@evil:1"], "not an IP address or a host name"),
    (["SSL://" + "a" * 64 + ".example:1"], "not an IP address or a host name"),
    (["SSL://-a.example:1"], "not an IP address or a host name"),
    (["SSL://h:09093"], "09093 is not a port number"),
    (["SSL://h:1", "SSL://h:1"], "endpoints names SSL twice"),
    (["PLAINTEXT://h:1", "SSL://h:2", "PLAINTEXT://i:1"], "endpoints names PLAINTEXT twice"),
])
def test_hostile_endpoints_are_refused_in_one_line(endpoints, what):
    with pytest.raises(ValueError, match="/brokers/ids/5: .*" + re.escape(what)) as e:
        paths.decode_broker(5, _node(host="h", port=1, endpoints=endpoints))
    assert "\n" not in str(e.value)


def test_a_node_naming_no_listener_at_all_is_refused():
    with pytest.raises(ValueError, match="names no listener"):
        paths.decode_broker(5, _node(endpoints=[]))


def test_advertised_info_takes_the_ssl_listener():
    info = advertised_info(7, "tcp://a:1,ssl://b:2,ssl://c:3,unix:///x.sock", [])
    assert info == paths.BrokerInfo(7, "a", 1, "/x.sock", "b", 2)
    with socket.socket() as plain, socket.socket() as tls:
        plain.bind(("127.0.0.1", 0))
        tls.bind(("127.0.0.1", 0))
        info = advertised_info(7, "", [("tcp://127.0.0.1:0", plain),
                                       ("ssl://127.0.0.1:0", tls)])
        assert info == paths.BrokerInfo(7, "127.0.0.1", plain.getsockname()[1], None,
                                        "127.0.0.1", tls.getsockname()[1])
