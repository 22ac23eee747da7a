"""A replica takes the whole topic config a LEADER_AND_ISR carries (issue 37: the
controller sends it again after ``topics alter --zookeeper --config``).

A real standalone broker (7) given LEADER_AND_ISR by hand, as the controller
sends them: the config a request carries for a topic becomes the replica's
overrides in ``partition.json`` (a key left out is removed, an empty config
removes them all) and acts at once (``min.insync.replicas``); a topic the
request carries no config for keeps its own, as does a STOP_REPLICA; a config
the writer cannot take is refused for that partition and changes nothing.
"""

from __future__ import annotations

import json
import os

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker, TopicConfigEntry
from tests.integration.test_replication_handler import ask
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    module_broker,
    new_topic,
    produce_request,
    uri,
    wait_for,
)

served = module_broker(num_partitions=1, broker_id=7)
_epochs = iter(range(1, 10_000))


def told(uri_: str, topic: str, configs, isr=(7,), leader_epoch=1):
    """LEADER_AND_ISR of partition 0 led here; ``configs`` None: no config entry for
    the topic, else its whole config (maybe empty)."""
    entries = () if configs is None else (rproto.TopicConfigs(topic, tuple(
        TopicConfigEntry(k, v) for k, v in configs.items())),)
    answer = ask(uri_, rproto.LeaderAndIsrRequest(99, next(_epochs), (
        rproto.LeaderAndIsrPartition(topic, 0, 7, leader_epoch, tuple(isr), 0, (7, 8)),),
        entries, (MetadataBroker(8, "127.0.0.1", 1, None),)), rproto.LeaderAndIsrResponse)
    assert answer.error_code == ErrorCode.NONE
    (part,) = answer.partitions
    return part.error_code


def overrides(served, topic: str) -> dict[str, str]:
    path = os.path.join(served.settings["log.dirs"], f"{topic}_0", "partition.json")
    with open(path) as f:
        return json.load(f)["config"]


def acks_all(uri_: str, topic: str) -> ErrorCode:
    with SimpleClient(uri_) as client:
        (part,) = client.request(produce_request(
            topic, 0, encode_message_set([b"m" * 10]), acks=-1, timeout_ms=200)).partitions
        return part.error_code


def test_the_config_a_replica_is_told_replaces_its_overrides(uri, served):
    topic = new_topic("whole")
    assert told(uri, topic, {"retention.ms": "60000", "segment.bytes": "4096",
                             "min.insync.replicas": "2"}) == ErrorCode.NONE
    assert overrides(served, topic) == {"retention.ms": "60000", "segment.bytes": "4096",
                                        "min.insync.replicas": "2"}
    assert acks_all(uri, topic) == ErrorCode.NOT_ENOUGH_REPLICAS  # ISR (7) below 2

    # a key left out is removed; min.insync.replicas back to the default acts at once
    assert told(uri, topic, {"retention.ms": "1000"}) == ErrorCode.NONE
    assert overrides(served, topic) == {"retention.ms": "1000"}
    wait_for(lambda: acks_all(uri, topic) == ErrorCode.NONE)

    # no config entry for the topic: the replica keeps its own
    assert told(uri, topic, None) == ErrorCode.NONE
    assert overrides(served, topic) == {"retention.ms": "1000"}

    # an empty config removes every override
    assert told(uri, topic, {}) == ErrorCode.NONE
    assert overrides(served, topic) == {}


def test_a_config_the_writer_cannot_take_changes_nothing(uri, served):
    topic = new_topic("badconf")
    assert told(uri, topic, {"flush.ms": "50"}) == ErrorCode.NONE
    for bad in ({"flush.ms": "soon"}, {"segment.bytes": "1"}, {"no.such.key": "1"},
                {"min.insync.replicas": "9"}):
        assert told(uri, topic, bad) != ErrorCode.NONE
        assert overrides(served, topic) == {"flush.ms": "50"}
    assert acks_all(uri, topic) == ErrorCode.NONE


def test_a_stop_replica_keeps_the_overrides(uri, served):
    topic = new_topic("stopkeeps")
    assert told(uri, topic, {"retention.bytes": "100000"}) == ErrorCode.NONE
    answer = ask(uri, rproto.StopReplicaRequest(99, next(_epochs), 0, (
        rproto.StopReplicaPartition(topic, 0),)), rproto.StopReplicaResponse)
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE]
    assert overrides(served, topic) == {"retention.bytes": "100000"}


def test_every_handler_checks_produces_against_the_config_just_taken(uri, served):
    topic = new_topic("maxbytes")
    assert told(uri, topic, {}) == ErrorCode.NONE
    big = encode_message_set([b"x" * 300])
    with SimpleClient(uri) as client:
        (part,) = client.request(produce_request(topic, 0, big, acks=1)).partitions
        assert part.error_code == ErrorCode.NONE
    assert told(uri, topic, {"max.message.bytes": "100"}) == ErrorCode.NONE
    with SimpleClient(uri) as client:  # the handler's cached config was dropped
        (part,) = client.request(produce_request(topic, 0, big, acks=1)).partitions
        assert part.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert told(uri, topic, {}) == ErrorCode.NONE
    with SimpleClient(uri) as client:
        (part,) = client.request(produce_request(topic, 0, big, acks=1)).partitions
        assert part.error_code == ErrorCode.NONE
