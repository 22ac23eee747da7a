"""``GET /metrics`` of a real broker's hb-http, parsed with
``prometheus_client``'s parser and checked against what the broker answers
over the wire: log end offsets after a known produce, the counters after a
known produce and fetch, a group's lag after a known commit."""

from __future__ import annotations

import http.client

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from tests.integration.broker import Broker
from tests.integration.wire_helpers import log_end, new_topic, stop_or_kill, wait_for
from tests.metrics.scrape import Parsed
from tests.ports import free_port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("hb"),
                    http_listeners=f"http://127.0.0.1:{free_port()}",
                    http_metrics_lag_interval_ms=0)
    broker.start()
    yield broker
    stop_or_kill(broker)


def get(broker, path: str = "/metrics", method: str = "GET"):
    host, port = broker.settings["http.listeners"].removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        conn.close()


def scrape(broker) -> Parsed:
    status, headers, body = get(broker)
    assert status == 200, body
    assert headers["Content-Type"] == CONTENT_TYPE_LATEST
    return Parsed(body)


def test_log_end_offsets_after_a_known_produce(served):
    topic = new_topic("h")
    with served.client() as c:
        c.create_topic(topic, 2)
        c.produce(topic, 1, encode_message_set([b"k" * 300, b"l" * 3]))
        ends = [log_end(c, topic, p) for p in range(2)]
    got = scrape(served)
    for p in range(2):
        assert got.value("hostbroker_partition_log_end_offset", topic=topic, partition=p) == ends[p]
        assert got.value("hostbroker_partition_size_bytes", topic=topic, partition=p) == ends[p]
    assert ends[1] > 0 == ends[0]
    info = got.series("hostbroker_broker_info")
    assert [s.labels["mode"] for s in info] == ["standalone"]
    # hb-http is on the board like every worker, and up
    assert got.value("hostbroker_process_up", kind="http", index=0) == 1


def _api(got: Parsed, name: str, api: str) -> float:
    found = got.series(name, api=api)
    return found[0].value if found else 0.0


def test_counters_after_a_known_produce_and_fetch(served):
    topic = new_topic("h")
    sets = [encode_message_set([b"p" * 100] * 5), encode_message_set([b"q" * 7] * 2)]
    with served.client() as c:
        c.create_topic(topic, 1)
        before = scrape(served)
        for message_set in sets:
            c.produce(topic, 0, message_set)
        end = log_end(c, topic, 0)
        fetched = c.fetch(topic, 0, 0, 1 << 20)
    assert end == sum(len(s) for s in sets)
    assert len(fetched.message_set) == end

    def counted():
        got = scrape(served)
        labels = {"topic": topic, "partition": 0}
        return (got.value("hostbroker_partition_messages_in_total", **labels) == 7
                and got.value("hostbroker_partition_fetches_total", **labels) == 1
                and got)

    got = wait_for(counted, timeout=10)
    assert got, "the counts of the produce and fetch did not show"
    labels = {"topic": topic, "partition": 0}
    assert got.value("hostbroker_partition_in_bytes_total", **labels) == end
    assert got.value("hostbroker_partition_out_bytes_total", **labels) == end
    # per request kind: at least the requests this test sent (others' come too)
    assert _api(got, "hostbroker_requests_total", "produce") - _api(
        before, "hostbroker_requests_total", "produce") >= 2
    assert _api(got, "hostbroker_requests_total", "fetch") - _api(
        before, "hostbroker_requests_total", "fetch") >= 1
    count = got.value("hostbroker_request_latency_seconds_count", api="produce")
    assert count == _api(got, "hostbroker_requests_total", "produce")
    assert got.value("hostbroker_request_latency_seconds_bucket", api="produce",
                     le="+Inf") == count


def test_a_groups_lag_after_a_known_commit(served):
    topic, group = new_topic("h"), new_topic("g")
    with served.client() as c:
        c.create_topic(topic, 1)
        for _ in range(4):
            c.produce(topic, 0, encode_message_set([b"v" * 90]))
        end = log_end(c, topic, 0)
    member = CoordinatorClient([served.unix], timeout=10, client_id="metrics-test")
    try:
        joined = member.join_group(group, "", {topic: 1}, session_timeout_ms=30000,
                                   rebalance_timeout_ms=5000)
        assert joined.error_code == ErrorCode.NONE
        member.sync_group(group, joined.generation, joined.member_id)
        committed = end // 4
        assert member.commit(group, joined.generation, joined.member_id,
                             [(topic, 0, committed, None)]) == {(topic, 0): ErrorCode.NONE}
        got = scrape(served)
        labels = {"group": group, "topic": topic, "partition": 0}
        assert got.value("hostbroker_group_committed_offset", **labels) == committed
        assert got.value("hostbroker_group_lag_bytes", **labels) == end - committed
        assert got.value("hostbroker_group_members", group=group) == 1
    finally:
        member.close()


def test_only_get_and_head(served):
    status, headers, body = get(served, method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    status, headers, _ = get(served, method="POST")
    assert status == 405 and "GET" in headers["Allow"]
