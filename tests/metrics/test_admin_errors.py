"""The errors of ALTER_TOPIC (19), LIST_OFFSET_GROUPS (20) and
DESCRIBE_TOPIC_CONFIGS (21) count in ``hostbroker_request_errors_total``, as
every other kind's do (``workers/stats_record.py``: one per answer with a
top-level or any per-item error code other than 0), on a real broker's
scrape; their answers without an error do not."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hostbroker.errors import ErrorCode
from tests.integration.broker import Broker
from tests.integration.wire_helpers import new_topic, stop_or_kill, wait_for
from tests.metrics.scrape import Parsed
from tests.metrics.test_http_scrape import scrape
from tests.ports import free_port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("hb"),
                    http_listeners=f"http://127.0.0.1:{free_port()}")
    broker.start()
    yield broker
    stop_or_kill(broker)


def _errors(got: Parsed, api: str) -> float:
    found = got.series("hostbroker_request_errors_total", api=api)
    return found[0].value if found else 0.0


def _requests(got: Parsed, api: str) -> float:
    found = got.series("hostbroker_requests_total", api=api)
    return found[0].value if found else 0.0


def _counted(broker, api: str, requests: float, errors: float) -> Parsed:
    """The first scrape where ``api`` shows ``requests`` answered (the
    processor counts them as it hands each answer over), checked to show
    ``errors`` errors."""
    got = wait_for(lambda: (g := scrape(broker)) and _requests(g, api) >= requests and g,
                   timeout=10)
    assert got, f"{requests} answers of {api} did not show"
    assert _errors(got, api) == errors, (api, _errors(got, api), errors)
    return got


def test_alter_topic_errors_are_counted(served):
    topic = new_topic("alt")
    with served.client() as c:
        c.create_topic(topic, 2)
        before = scrape(served)
        n, errors = _requests(before, "alter_topic"), _errors(before, "alter_topic")
        # refused: partitions only grow
        shrink = c.alter_topic(topic, partitions=1, raise_on_error=False)
        assert shrink.error_code == ErrorCode.INVALID_PARTITIONS
        _counted(served, "alter_topic", n + 1, errors + 1)
        # refused before the topic is looked at: an unknown config key
        bad = c.alter_topic(topic, set_configs={"no.such.key": "1"}, raise_on_error=False)
        assert bad.error_code == ErrorCode.INVALID_CONFIG
        # accepted (answered once every writer changed its partitions): no error
        c.alter_topic(topic, partitions=3, set_configs={"retention.ms": "600000"})
        c.alter_topic(topic, partitions=4, validate_only=True)
    _counted(served, "alter_topic", n + 4, errors + 2)


def test_describe_topic_configs_errors_are_counted(served):
    topic = new_topic("cfg")
    with served.client() as c:
        c.create_topic(topic, 1)
        before = scrape(served)
        n = _requests(before, "describe_topic_configs")
        errors = _errors(before, "describe_topic_configs")
        assert c.describe_topic_configs([topic])[0].error_code == ErrorCode.NONE
        _counted(served, "describe_topic_configs", n + 1, errors)
        # one unknown topic among known ones: a per-item error, one error answer
        found = c.describe_topic_configs([topic, new_topic("absent")])
        assert [t.error_code for t in found] == [ErrorCode.NONE,
                                                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    _counted(served, "describe_topic_configs", n + 2, errors + 1)


def test_list_offset_groups_errors_are_counted(served):
    """LIST_OFFSET_GROUPS is the coordinator's: one asked while the coordinator
    is stopped, which is then killed, is answered BROKER_NOT_AVAILABLE by the
    handler that waited for it (a fault caused for real: SIGSTOP, SIGKILL)."""
    with served.client() as c:
        before = scrape(served)
        n = _requests(before, "list_offset_groups")
        errors = _errors(before, "list_offset_groups")
        assert c.list_offset_groups().error_code == ErrorCode.NONE
    _counted(served, "list_offset_groups", n + 1, errors)
    coordinator = served.workers()["hb-coordinator"]
    answered = {}
    os.kill(coordinator, signal.SIGSTOP)
    try:
        def ask():
            with served.client(timeout=30) as c:
                answered["response"] = c.list_offset_groups()

        asker = threading.Thread(target=ask)
        asker.start()
        time.sleep(0.5)  # at the handler, waiting for the stopped coordinator
        assert "response" not in answered
    finally:
        os.kill(coordinator, signal.SIGKILL)
    asker.join(30)
    assert answered["response"].error_code == ErrorCode.BROKER_NOT_AVAILABLE, answered
    served.wait_worker_replaced("hb-coordinator", coordinator)
    _counted(served, "list_offset_groups", n + 2, errors + 1)
