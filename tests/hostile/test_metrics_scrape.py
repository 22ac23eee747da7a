"""Standing cases against ``/metrics``: what a client can name (a group id)
never changes the scrape's shape, and the series a client can multiply
(partitions, groups) stay within their bounds, the rest counted.

A group id is any string of up to 255 bytes: one holding quotes,
backslashes, line feeds and text that looks like a sample or a comment
line is read back by Prometheus' own parser as that group's label and
nothing else. A broker with more partitions and groups than
``http.metrics.max.partitions`` and ``http.metrics.max.groups`` reports
that many and counts the rest. Real broker, real hb-http, real sockets.
"""

from __future__ import annotations

import pytest

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.errors import ErrorCode
from tests.integration.broker import Broker
from tests.integration.wire_helpers import new_topic, stop_or_kill
from tests.metrics.scrape import Parsed, scraped
from tests.ports import free_port

MAX_PARTITIONS = 6
MAX_GROUPS = 4

HOSTILE_GROUPS = [
    'g"} 1\nhostbroker_connections 999\n# TYPE hostbroker_connections counter',
    'back\\slash\\"',
    "line\nfeed\r\n",
    "ünïcödé ✓",
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("hb"),
                    http_listeners=f"http://127.0.0.1:{free_port()}",
                    http_metrics_lag_interval_ms=0,
                    http_metrics_max_partitions=MAX_PARTITIONS,
                    http_metrics_max_groups=MAX_GROUPS)
    broker.start()
    yield broker
    stop_or_kill(broker)


def scrape(broker) -> Parsed:
    return scraped(broker)


def _member(broker, group: str, topic: str):
    client = CoordinatorClient([broker.unix], timeout=10, client_id="metrics-hostile")
    joined = client.join_group(group, "", {topic: 1}, session_timeout_ms=60000,
                               rebalance_timeout_ms=5000)
    assert joined.error_code == ErrorCode.NONE, joined
    client.sync_group(group, joined.generation, joined.member_id)
    return client, joined


def test_group_ids_cannot_inject_lines(served):
    topic = new_topic("x")
    with served.client() as c:
        c.create_topic(topic, 1)
    members = []
    try:
        for group in HOSTILE_GROUPS:
            client, joined = _member(served, group, topic)
            members.append(client)
            assert client.commit(group, joined.generation, joined.member_id,
                                 [(topic, 0, 0, None)]) == {(topic, 0): ErrorCode.NONE}
        got = scrape(served)
        groups = {s.labels["group"] for s in got.series("hostbroker_group_members")}
        assert groups == set(HOSTILE_GROUPS)
        for group in HOSTILE_GROUPS:
            assert got.value("hostbroker_group_committed_offset", group=group, topic=topic,
                             partition=0) == 0
        # the injected text made no sample and changed no family's type
        assert len(got.series("hostbroker_connections")) == 1
        assert got.value("hostbroker_connections") < 999
        assert got.families["hostbroker_connections"].type == "gauge"
    finally:
        for client in members:
            client.close()


def test_partitions_and_groups_past_their_bounds_are_counted_not_shown(served):
    topic = new_topic("x")
    with served.client() as c:
        c.create_topic(topic, MAX_PARTITIONS + 2)
        partitions = sum(len(t.partitions) for t in c.metadata().topics)
    members = [_member(served, new_topic("many"), topic)[0] for _ in range(MAX_GROUPS + 1)]
    try:
        got = scrape(served)
        assert len(got.series("hostbroker_partition_log_end_offset")) == MAX_PARTITIONS
        assert got.value("hostbroker_metrics_partitions_omitted") == partitions - MAX_PARTITIONS
        shown = len(got.series("hostbroker_group_members"))
        assert shown <= MAX_GROUPS
        assert got.value("hostbroker_metrics_groups_omitted") >= MAX_GROUPS + 1 - shown
    finally:
        for client in members:
            client.close()
