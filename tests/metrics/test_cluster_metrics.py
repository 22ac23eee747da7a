"""``/metrics``' partition series in cluster mode, on a real ZooKeeper: each
broker reports the replicas it holds, exactly the leader ZooKeeper names
says it leads, and the leader says under-replicated 0 once the ISR is full."""

from __future__ import annotations

from hostbroker.metrics.collectors import BrokerCollector, PartitionCollector
from tests.cluster.conftest import zk, zookeeper  # noqa: F401 - fixtures
from tests.integration.conftest import make_broker  # noqa: F401 - fixture
from tests.integration.wire_helpers import new_topic
from tests.metrics.scrape import Parsed, collected, context_of
from tests.replication.conftest import cluster  # noqa: F401 - fixture
from tests.replication.support import assignment, create, poll, settled, state


def test_each_broker_reports_its_replicas_and_the_leader_its_leadership(
        cluster, zookeeper, zk):  # noqa: F811 - fixtures
    topic = new_topic("c")
    create(zookeeper, topic, 2, 2)
    poll(lambda: settled(zk, topic, 2, 2), what="the topic led with a full ISR")
    replicas = assignment(zk, topic)
    contexts = {b: context_of(broker) for b, broker in cluster.items()}
    try:
        def scrapes():
            return {b: Parsed(collected(PartitionCollector(c, 20000)))
                    for b, c in contexts.items()}

        def agrees():
            got = scrapes()
            for p in range(2):
                leader = state(zk, topic, p)["leader"]
                for b, scrape in got.items():
                    found = scrape.series("hostbroker_partition_leader", topic=topic,
                                          partition=p)
                    if b not in replicas[p]:
                        assert not found, f"broker {b} holds no replica of {topic}-{p}"
                        continue
                    if [s.value for s in found] != [1 if b == leader else 0]:
                        return False
                    under = scrape.value("hostbroker_partition_under_replicated",
                                         topic=topic, partition=p)
                    if under != 0:
                        return False
            return True

        poll(agrees, what="each broker's series as ZooKeeper has it")
        for context in contexts.values():
            info = Parsed(collected(BrokerCollector(context))).series("hostbroker_broker_info")
            assert [s.labels["mode"] for s in info] == ["cluster"]
    finally:
        for context in contexts.values():
            context.close()
