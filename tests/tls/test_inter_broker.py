"""Brokers of a cluster reach each other over TLS (security.inter.broker.protocol
SSL), each as the CN of its certificate: real brokers, a real ZooKeeper, the
authorizer on and no ACL for User:ANONYMOUS. METADATA names the listener of
the kind the client came on.

Every test keeps its own brokers: no two use the same settings (super users, certificates,
inter-broker protocol, advertised listeners), and the first stops its leader."""

from __future__ import annotations

import json
import socket
import time

import pytest

from hostbroker.client import Producer
from hostbroker.client.leaders import merge_metadata
from hostbroker.client.tls import handshake, tls_context
from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol import replication as rp
from hostbroker.cluster import replica_nodes
from tests.cluster.conftest import zk, zookeeper  # noqa: F401 - fixtures
from tests.replication.support import (SETTINGS, Wire, fetch_all, poll,
                                       segment_bytes, settled, state)
from tests.tls.certs import broker_certificate
from tests.tls.conftest import TlsBroker

TOPIC = "secured"


@pytest.fixture
def start_plain(tmp_path, certs, zookeeper):
    """Brokers of a cluster with the default PLAINTEXT between them, each with
    an ssl:// listener too."""
    started: list[TlsBroker] = []

    def start(broker_id: int) -> TlsBroker:
        root = tmp_path / f"p{broker_id}"
        root.mkdir()
        broker = TlsBroker(root, certs, **{**SETTINGS, "zookeeper.connect": zookeeper.connect,
                                           "broker.id": broker_id})
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.finish()


@pytest.fixture
def start_broker(tmp_path, certs, zookeeper):
    started: list[TlsBroker] = []

    def start(broker_id: int, cn: str, super_users: str, **more) -> TlsBroker:
        root = tmp_path / f"b{broker_id}"
        root.mkdir()
        broker = TlsBroker(root, certs, **{
            **SETTINGS, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id,
            "authorizer.enable": "true", "super.users": super_users,
            "security.inter.broker.protocol": "SSL",
            "ssl.keystore.location": broker_certificate(certs, cn), **more})
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.finish()


def place(zk, topic: str, replicas: dict[int, list[int]]) -> None:
    """A replicated topic whose replicas are placed as ``replicas`` says (the
    first of each its preferred leader), written as ``topics create`` writes it."""
    zk.create(replica_nodes.topic_config_path(topic), replica_nodes.encode_topic_config({}),
              makepath=True)
    zk.create(replica_nodes.assignment_path(topic), replica_nodes.encode_assignment(replicas),
              makepath=True)


def _ssl_call(broker: TlsBroker, certs, frame: bytes) -> bytes:
    """One request over ``broker``'s ssl:// listener, showing broker1's certificate."""
    context = tls_context({"ssl.truststore.location": certs.ca,
                           "ssl.keystore.location": broker_certificate(certs, "broker1")})
    sock = socket.create_connection(("127.0.0.1", broker.ssl_port), 10)
    with handshake(context, sock, "127.0.0.1", 10) as tls:
        tls.sendall(frame)
        out = b""
        while len(out) < 4 or len(out) < 4 + int.from_bytes(out[:4], "big"):
            chunk = tls.recv(65536)
            assert chunk, "the broker closed the connection"
            out += chunk
        return out[4:]


def _tcp_call(broker: TlsBroker, frame: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", broker.port), 10) as sock:
        sock.sendall(frame)
        out = b""
        while len(out) < 4 or len(out) < 4 + int.from_bytes(out[:4], "big"):
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            out += chunk
        return out[4:]


def _metadata_v1(call) -> rp.MetadataResponseV1:
    answer = call(rp.encode_request(rp.MetadataRequestV1(topics=[TOPIC]), 1, "", 1))
    return rp.decode_response(answer, rp.MetadataResponseV1)[1]


def _metadata_v1_once_led(call, timeout: float = 30.0) -> rp.MetadataResponseV1:
    """The first METADATA v1 answer about TOPIC that names a leader of
    partition 0: the broker asked has taken the controller's LEADER_AND_ISR
    (which stores the leader's listeners before the partition's leader), as a
    client that asks again until it is told a leader sees it."""
    answers = []

    def led() -> bool:
        answers.append(_metadata_v1(call))
        (topic,) = answers[-1].topics
        return any(p.partition == 0 and p.leader >= 0 for p in topic.partitions)

    poll(led, timeout=timeout, every=0.1, what="a METADATA answer naming a leader")
    return answers[-1]


def test_replication_over_tls_as_the_brokers_certificates(start_broker, certs, zk, zookeeper):
    supers = "User:broker1;User:broker2"
    brokers = {1: start_broker(1, "broker1", supers), 2: start_broker(2, "broker2", supers)}
    poll(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2"], what="registered")
    # the registration names the ssl:// listener in Kafka's endpoints list
    node = json.loads(zk.get("/brokers/ids/2")[0])
    assert node["endpoints"] == [f"PLAINTEXT://127.0.0.1:{brokers[2].port}",
                                 f"SSL://127.0.0.1:{brokers[2].ssl_port}"]
    place(zk, TOPIC, {0: [1, 2], 1: [2, 1]})  # (each broker leads one: each knows the other)
    poll(lambda: settled(zk, TOPIC, 2, 2), what="leaders and full ISRs")
    leader = state(zk, TOPIC, 0)["leader"]
    follower = 3 - leader
    # small messages, then larger ones (each FETCH answer then spans many TLS records)
    values = [b"m%d" % i for i in range(5)] + [b"%d" % i * 50_000 for i in range(5, 25)]
    wire = Wire(brokers[leader].unix_path)
    try:  # (the first once the leader has taken the controller's word)
        poll(lambda: wire.produce(TOPIC, 0, values[:1], acks=-1)[0] == ErrorCode.NONE,
             every=0.2, what="a first produce acknowledged by both replicas")
        for value in values[1:]:
            assert wire.produce(TOPIC, 0, [value], acks=-1)[0] == ErrorCode.NONE
    finally:
        wire.close()
    assert "User:ANONYMOUS" not in "".join(b.log() for b in brokers.values())
    for b in brokers.values():  # the brokers' principals are super users: nothing to say
        assert "warning: authorizer.enable in cluster mode" not in b.log()

    # METADATA names the listener of the client's kind
    ssl_answer = _metadata_v1(lambda f: _ssl_call(brokers[leader], certs, f))
    assert {(b.broker_id, b.port) for b in ssl_answer.brokers} == {
        (1, brokers[1].ssl_port), (2, brokers[2].ssl_port)}
    assert not any(b.unix_path for b in ssl_answer.brokers)
    # and a client bootstrapped there is sent to each leader's ssl:// listener
    leaders = merge_metadata(TOPIC, [(brokers[leader].ssl, ssl_answer)])
    for p in (0, 1):
        at = state(zk, TOPIC, p)["leader"]
        assert leaders.leader_uri(p) == (at, brokers[at].ssl)
    # a client of a tcp:// or unix:// listener is given every broker's plain
    # listeners (the LEADER_AND_ISR named every kind), each partition's leader
    # (a tcp:// client here is User:ANONYMOUS, who may describe nothing: asked
    # over the Unix socket)
    for asked in (1, 2):
        wire = Wire(brokers[asked].unix_path)
        try:
            plain_answer = wire.metadata([TOPIC])
        finally:
            wire.close()
        assert sorted((b.broker_id, b.port, b.unix_path) for b in plain_answer.brokers) == [
            (n, brokers[n].port, brokers[n].unix_path) for n in (1, 2)]
        (topic,) = plain_answer.topics
        assert sorted((p.partition, p.leader, p.error_code) for p in topic.partitions) == [
            (n, state(zk, TOPIC, n)["leader"], ErrorCode.NONE) for n in (0, 1)]
    tcp_v0 = api.decode_response(api.ApiKey.METADATA, _tcp_call(
        brokers[leader], api.encode_request(api.MetadataRequest(topics=[TOPIC]), 2)))
    assert [(b.host, b.port) for b in tcp_v0[1].brokers] == [("127.0.0.1", brokers[leader].port)]
    ssl_v0 = api.decode_response(api.ApiKey.METADATA, _ssl_call(
        brokers[leader], certs, api.encode_request(api.MetadataRequest(topics=[TOPIC]), 2)))
    assert [(b.host, b.port) for b in ssl_v0[1].brokers] == [
        ("127.0.0.1", brokers[leader].ssl_port)]

    # the leader goes: the follower, in the ISR by its fetches over TLS, leads
    # with every acknowledged message
    brokers[leader].finish()
    poll(lambda: state(zk, TOPIC, 0)["leader"] == follower, what="the follower leads")
    wire = Wire(brokers[follower].unix_path)
    try:
        poll(lambda: [v for _, v in fetch_all(wire, TOPIC, 0)] == values,
             what="the acknowledged messages at the new leader")
    finally:
        wire.close()


def test_a_broker_whose_principal_is_not_a_super_user_is_refused(start_broker, certs, zk,
                                                                 zookeeper):
    trusted = start_broker(1, "broker1", "User:broker1")
    poll(lambda: zk.exists("/controller") is not None, what="broker 1 controls")
    outsider = start_broker(3, "outsider", "User:broker1")
    assert "User:outsider" in outsider.log() and "not in super.users" in outsider.log()
    place(zk, TOPIC, {0: [1, 3], 1: [3, 1]})  # (each broker leads one partition)
    poll(lambda: all(state(zk, TOPIC, p)["leader"] >= 0 for p in (0, 1)), what="leaders")
    assert {p: state(zk, TOPIC, p)["leader"] for p in (0, 1)} == {0: 1, 1: 3}
    mine, theirs = 0, 1
    for broker, partition, value in ((trusted, mine, b"kept"), (outsider, theirs, b"shared")):
        wire = Wire(broker.unix_path)
        try:  # (once the leader has taken the controller's word)
            poll(lambda: wire.produce(TOPIC, partition, [value], acks=1)[0] == ErrorCode.NONE,
                 every=0.2, what=f"a produce to the leader of partition {partition}")
        finally:
            wire.close()
    # broker 1, a super user at the outsider, follows it over TLS...
    poll(lambda: b"shared" in segment_bytes(trusted, TOPIC, theirs), what="broker 1 follows")
    # ...the outsider, not one at broker 1, is refused: said in its log, nothing copied
    poll(lambda: "CLUSTER_AUTHORIZATION_FAILED" in outsider.log(), timeout=20,
         what="the outsider's follower refused, said in its log")
    time.sleep(1)  # (long enough for a fetch that would have gone through)
    assert b"kept" not in segment_bytes(outsider, TOPIC, mine)


def test_an_ssl_client_of_a_plaintext_cluster_reaches_the_other_leader_at_its_ssl_port(
        start_plain, certs, zk):
    """PLAINTEXT between brokers: a client bootstrapped at one broker's ssl://
    listener is sent to the other broker's ssl:// listener for the partition it
    leads, and produces there."""
    brokers = {1: start_plain(1), 2: start_plain(2)}
    poll(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2"], what="registered")
    place(zk, TOPIC, {0: [2, 1]})  # broker 2 leads, broker 1 follows
    poll(lambda: settled(zk, TOPIC, 1, 2), what="a leader and a full ISR")
    # ZooKeeper's state node is written by the controller before it sends its
    # LEADER_AND_ISR, and broker 1 learns broker 2's listeners (its peers table)
    # only from that request: a client asks again until broker 1 names a
    # leader, as this does; then broker 2 must be listed, at its ssl:// port
    answer = _metadata_v1_once_led(lambda f: _ssl_call(brokers[1], certs, f))
    assert sorted((b.broker_id, b.host, b.port, b.unix_path or None) for b in answer.brokers) == [
        (n, "127.0.0.1", brokers[n].ssl_port, None) for n in (1, 2)]
    ((part,),) = [t.partitions for t in answer.topics]
    assert (part.leader, part.error_code) == (2, ErrorCode.NONE)
    assert merge_metadata(TOPIC, [(brokers[1].ssl, answer)]).leader_uri(0) == (
        2, brokers[2].ssl)
    with Producer(brokers[1].ssl, {**certs.client("alice"), "request.required.acks": "-1"}
                  ) as producer:
        producer.send(TOPIC, b"over-tls")
    poll(lambda: b"over-tls" in segment_bytes(brokers[2], TOPIC, 0), what="at the leader")
    poll(lambda: b"over-tls" in segment_bytes(brokers[1], TOPIC, 0), what="at the follower")
    # a plain client of the same broker is given the plain listeners
    wire = Wire(brokers[1].unix_path)
    try:
        plain = wire.metadata([TOPIC])
    finally:
        wire.close()
    assert sorted((b.broker_id, b.port, b.unix_path) for b in plain.brokers) == [
        (n, brokers[n].port, brokers[n].unix_path) for n in (1, 2)]


def test_a_broker_names_itself_as_it_registers(make_tls_broker, certs):
    """METADATA names the answering broker by its advertised listeners (what
    its registration says), not by the address it bound."""
    broker = make_tls_broker(start=False)
    broker.settings["advertised.listeners"] = (
        f"tcp://localhost:{broker.port},ssl://localhost:{broker.ssl_port}")
    broker.start()
    ssl_v0 = api.decode_response(api.ApiKey.METADATA, _ssl_call(
        broker, certs, api.encode_request(api.MetadataRequest(topics=[]), 2)))
    assert [(b.host, b.port) for b in ssl_v0[1].brokers] == [("localhost", broker.ssl_port)]
    tcp_v0 = api.decode_response(api.ApiKey.METADATA, _tcp_call(
        broker, api.encode_request(api.MetadataRequest(topics=[]), 2)))
    assert [(b.host, b.port) for b in tcp_v0[1].brokers] == [("localhost", broker.port)]
