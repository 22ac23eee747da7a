"""A broker holding no replica of a replicated topic never makes a plain topic of
its name (hb-registrar publishes the names, shm/topicnames.py; the handler's
auto-create and CREATE_TOPIC refuse them), while plain topics are still
auto-created in cluster mode. Real brokers on a real ZooKeeper."""

from __future__ import annotations

import os
import signal
import time

import psutil

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.cluster import replica_nodes
from tests.replication.support import SETTINGS, Wire, poll


def _broker(make_broker, tmp_path, zookeeper, zk, broker_id=1, **settings):
    root = tmp_path / f"b{broker_id}"
    root.mkdir()
    broker = make_broker(root=root, **{
        **SETTINGS, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id, **settings})
    poll(lambda: zk.exists(f"/brokers/ids/{broker_id}") is not None, what="registered")
    return broker


def _create(wire: Wire, topic: str) -> api.AdminResponse:
    answer = wire.call(api.encode_request(api.CreateTopicRequest(topic, 1), wire.next_id()))
    _, body = api.decode_response(api.ApiKey.CREATE_TOPIC, answer)
    return body


def _replicated(zk, topic: str, replicas=(7,)) -> None:
    zk.create(replica_nodes.assignment_path(topic),
              replica_nodes.encode_assignment({0: list(replicas)}),
              makepath=True)


def test_create_topic_of_a_replicated_name_is_refused_naming_it(make_broker, zookeeper, zk,
                                                                 tmp_path):
    _replicated(zk, "held-elsewhere")
    broker = _broker(make_broker, tmp_path, zookeeper, zk)
    wire = Wire(broker.unix_path)
    try:
        answer = _create(wire, "held-elsewhere")
        assert answer.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert "held-elsewhere" in answer.error_message
        assert "replicated" in answer.error_message
        # a plain topic of another name is created as ever
        assert _create(wire, "plain-one").error_code == ErrorCode.NONE
    finally:
        wire.close()
    names = os.listdir(broker.settings["log.dirs"])
    assert "held-elsewhere_0" not in names
    assert "plain-one_0" in names


def _produced(wire: Wire, topic: str, value: bytes, until, timeout: float = 10.0) -> list:
    """The answers to one produce asked again while ``until(code)`` is false (every
    10 ms, as a client retrying LEADER_NOT_AVAILABLE would); the last one first."""
    answers = []
    deadline = time.monotonic() + timeout
    while True:
        answers.insert(0, wire.produce(topic, 0, [value], acks=1))
        if until(answers[0][0]) or time.monotonic() > deadline:
            return answers
        time.sleep(0.01)


def test_a_plain_topic_is_still_auto_created_in_cluster_mode(make_broker, zookeeper, zk,
                                                            tmp_path):
    """Once the registrar has read ZooKeeper's topics after the first produce
    asked (LEADER_NOT_AVAILABLE until then, retriable): at once on a quiet broker."""
    broker = _broker(make_broker, tmp_path, zookeeper, zk)
    wire = Wire(broker.unix_path)
    try:
        started = time.monotonic()
        answers = _produced(wire, "plainly", b"kept", lambda code: code == ErrorCode.NONE)
        waited = time.monotonic() - started
    finally:
        wire.close()
    assert answers[0] == (0, 0)
    assert {code for code, _ in answers[1:]} <= {ErrorCode.LEADER_NOT_AVAILABLE}
    assert waited < 5
    assert "plainly_0" in os.listdir(broker.settings["log.dirs"])


def test_a_produce_before_the_watch_fired_makes_no_plain_topic(make_broker, zookeeper, zk,
                                                              tmp_path):
    """A client that knows of a replicated topic (its state node, another
    broker's METADATA) can reach a broker before that broker's watch of
    /brokers/topics has fired; a plain topic of the name made then would take
    acknowledged messages outside the replicated one. The watch is held back
    for real: the broker's registrar is SIGSTOPped (well within its ZooKeeper
    session) while the topic is created. Its produces wait
    (LEADER_NOT_AVAILABLE) and no plain topic is made; once the registrar runs
    again they are refused NOT_LEADER_FOR_PARTITION (it holds no replica)."""
    broker = _broker(make_broker, tmp_path, zookeeper, zk,
                     **{"zookeeper.session.timeout.ms": 20000})
    registrar = psutil.Process(broker.workers()["hb-registrar"])
    wire = Wire(broker.unix_path)
    registrar.send_signal(signal.SIGSTOP)
    try:
        _replicated(zk, "raced")
        answers = _produced(wire, "raced", b"lost", lambda code: False, timeout=1.0)
        assert len(answers) > 5
        assert {code for code, _ in answers} == {ErrorCode.LEADER_NOT_AVAILABLE}
        assert "raced_0" not in os.listdir(broker.settings["log.dirs"])
    finally:
        registrar.send_signal(signal.SIGCONT)
    try:
        answers = _produced(wire, "raced", b"lost",
                            lambda code: code == ErrorCode.NOT_LEADER_FOR_PARTITION)
        assert answers[0][0] == ErrorCode.NOT_LEADER_FOR_PARTITION
        assert {code for code, _ in answers[1:]} <= {ErrorCode.LEADER_NOT_AVAILABLE}
    finally:
        wire.close()
    assert "raced_0" not in os.listdir(broker.settings["log.dirs"])


def test_a_topic_made_replicated_while_the_broker_runs_is_refused(make_broker, zookeeper, zk,
                                                                  tmp_path):
    broker = _broker(make_broker, tmp_path, zookeeper, zk)
    _replicated(zk, "late")
    wire = Wire(broker.unix_path)
    try:
        # the produce waits for a read of /brokers/topics begun after it came
        answers = _produced(wire, "late", b"lost",
                            lambda code: code != ErrorCode.LEADER_NOT_AVAILABLE)
        assert answers[0][0] == ErrorCode.NOT_LEADER_FOR_PARTITION
        assert _create(wire, "late").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        code, _ = wire.produce("late", 0, [b"lost"], acks=1)
        assert code == ErrorCode.NOT_LEADER_FOR_PARTITION
    finally:
        wire.close()
    assert "late_0" not in os.listdir(broker.settings["log.dirs"])
