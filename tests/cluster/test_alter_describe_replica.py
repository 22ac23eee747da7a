"""DESCRIBE_TOPIC_CONFIGS on a cluster broker that holds some partitions of
a replicated topic but not its partition 0 (issue 37): the topic is
described from the lowest partition it holds, not answered as unknown.

A real standalone broker (7) given LEADER_AND_ISR by hand, as the
controller sends them (``test_alter_zk_replica_config``)."""

from __future__ import annotations

from hostbroker.client.simple import SimpleClient
from hostbroker.errors import ErrorCode
from hostbroker.protocol import replication as rproto
from hostbroker.protocol.bodies import MetadataBroker, TopicConfigEntry
from tests.integration.test_replication_handler import ask
from tests.integration.wire_helpers import (  # noqa: F401 (uri is a fixture)
    module_broker,
    new_topic,
    uri,
)

served = module_broker(num_partitions=1, broker_id=7)


def test_a_topic_without_partition_0_here_is_described(uri):
    topic = new_topic("nozero")
    config = {"retention.ms": "60000", "segment.bytes": "4096"}
    answer = ask(uri, rproto.LeaderAndIsrRequest(99, 1, tuple(
        rproto.LeaderAndIsrPartition(topic, p, 7, 1, (7,), 0, (7, 8)) for p in (2, 3)),
        (rproto.TopicConfigs(topic, tuple(TopicConfigEntry(k, v) for k, v in config.items())),),
        (MetadataBroker(8, "127.0.0.1", 1, None),)), rproto.LeaderAndIsrResponse)
    assert answer.error_code == ErrorCode.NONE
    assert [p.error_code for p in answer.partitions] == [ErrorCode.NONE] * 2
    with SimpleClient(uri) as client:
        (described,) = client.describe_topic_configs([topic])
        assert described.error_code == ErrorCode.NONE
        assert {e.key: e.value for e in described.configs} == config
        listed = {t.topic: t for t in client.describe_topic_configs()}
        assert listed[topic].error_code == ErrorCode.NONE
