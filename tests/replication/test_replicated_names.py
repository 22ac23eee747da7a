"""A broker holding no replica of a replicated topic never makes a plain topic of
its name (hb-registrar publishes the names, shm/topicnames.py; the handler's
auto-create and CREATE_TOPIC refuse them), while plain topics are still
auto-created in cluster mode. Real brokers on a real ZooKeeper."""

from __future__ import annotations

import os
import time

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.replication import zknodes
from tests.replication.support import SETTINGS, Wire, poll


def _broker(make_broker, tmp_path, zookeeper, zk, broker_id=1):
    root = tmp_path / f"b{broker_id}"
    root.mkdir()
    broker = make_broker(root=root, **{
        **SETTINGS, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id})
    poll(lambda: zk.exists(f"/brokers/ids/{broker_id}") is not None, what="registered")
    return broker


def _create(wire: Wire, topic: str) -> api.AdminResponse:
    answer = wire.call(api.encode_request(api.CreateTopicRequest(topic, 1), wire.next_id()))
    _, body = api.decode_response(api.ApiKey.CREATE_TOPIC, answer)
    return body


def _replicated(zk, topic: str, replicas=(7,)) -> None:
    zk.create(zknodes.assignment_path(topic), zknodes.encode_assignment({0: list(replicas)}),
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


def test_a_plain_topic_is_still_auto_created_in_cluster_mode(make_broker, zookeeper, zk,
                                                            tmp_path):
    broker = _broker(make_broker, tmp_path, zookeeper, zk)
    wire = Wire(broker.unix_path)
    try:
        code, base = wire.produce("plainly", 0, [b"kept"], acks=1)
    finally:
        wire.close()
    assert (code, base) == (0, 0)
    assert "plainly_0" in os.listdir(broker.settings["log.dirs"])


def test_a_topic_made_replicated_while_the_broker_runs_is_refused(make_broker, zookeeper, zk,
                                                                  tmp_path):
    broker = _broker(make_broker, tmp_path, zookeeper, zk)
    _replicated(zk, "late")
    wire = Wire(broker.unix_path)
    try:
        # the registrar's children watch publishes it within a tick (it reads
        # /brokers/topics again every 2 s anyway)
        time.sleep(3)
        code, _ = wire.produce("late", 0, [b"lost"], acks=1)
        assert code == ErrorCode.NOT_LEADER_FOR_PARTITION
        assert _create(wire, "late").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        code, _ = wire.produce("late", 0, [b"lost"], acks=1)
        assert code == ErrorCode.NOT_LEADER_FOR_PARTITION
    finally:
        wire.close()
    assert "late_0" not in os.listdir(broker.settings["log.dirs"])
