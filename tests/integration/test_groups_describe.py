"""``hostbroker groups describe --bootstrap`` without ``--topic`` on a real
broker: it learns the group's topics from LIST_OFFSET_GROUPS of that group,
so it reads the offsets of those topics only, and a topic the group
committed on that is gone since is said and left out."""

from __future__ import annotations

import json
import time

from hostbroker.log.message import encode_message_set
from hostbroker.metrics.collectors import ApiCollector
from tests.integration.cli import hostbroker
from tests.metrics.scrape import Parsed, collected, context_of


def _offset_fetches(broker) -> float:
    context = context_of(broker)
    try:
        found = Parsed(collected(ApiCollector(context))).series(
            "hostbroker_requests_total", api="offset_fetch")
    finally:
        context.close()
    return found[0].value if found else 0.0


def _settled(broker) -> float:
    """The count once it stops moving (a processor counts an answer as it hands it over)."""
    last = _offset_fetches(broker)
    while True:
        time.sleep(0.3)
        now = _offset_fetches(broker)
        if now == last:
            return now
        last = now


def test_describe_reads_the_group_s_topics_only(make_broker):
    broker = make_broker()
    with broker.client(timeout=60) as c:
        c.metadata()  # (a connection's first answer is bounded by its setup timeout)
        c.create_topic("big", 1200)  # the old way asked all of it: two OFFSET_FETCHes
        c.create_topic("small", 2)
        c.produce("small", 1, encode_message_set([b"s" * 30]))
        c.offset_commit("quiet", [("small", 1, 4, None)])
    before = _settled(broker)
    result = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "quiet",
                        "--json")
    assert result.returncode == 0, result.stderr
    rows = [(r["topic"], r["partition"], r["committed"]) for r in
            json.loads(result.stdout)["partitions"]]
    assert rows == [("small", 0, None), ("small", 1, 4)]
    assert _settled(broker) == before + 1


def test_a_topic_committed_on_and_gone_is_said_and_left_out(make_broker):
    broker = make_broker()
    with broker.client() as c:
        c.create_topic("kept", 1)
        c.create_topic("gone", 1)
        c.offset_commit("reader", [("kept", 0, 0, None), ("gone", 0, 0, None)])
        c.delete_topic("gone")
    deadline = time.monotonic() + 20
    while True:  # a topic being deleted is still listed for a moment
        result = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group",
                            "reader", "--json")
        if b"no topic gone" in result.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (b"hostbroker groups describe: no topic gone on the broker "
                             b"(committed on by group reader)\n")
    rows = [(r["topic"], r["partition"]) for r in json.loads(result.stdout)["partitions"]]
    assert rows == [("kept", 0)]
