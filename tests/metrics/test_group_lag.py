"""A group's lag is worked out against the high watermark, in ``/metrics`` and
the console alike (:func:`hostbroker.metrics.lag.group_lag`).

The real case: a standalone broker with replicas across two log dirs, whose
follower's writer is stopped (SIGSTOP) while acks=1 produces go on, so the
leader's log end runs ahead of its high watermark for real. A group that
committed below the high watermark then shows ``high watermark - committed``,
never ``log end - committed``; one that committed past it shows 0 (and its
committed offset as it is). Once the follower copies again, the lag follows
the high watermark up to the log end. A refused ALTER_TOPIC of that topic
(forwarded to hb-logdirs and answered from there) counts as an error of
``alter_topic``.
"""

from __future__ import annotations

import os
import signal

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.metrics.lag import group_lag
from hostbroker.shm.partitions import ONLINE, ROLE_LEADER
from tests.console.web import ConsoleBroker, get
from tests.integration.wire_helpers import new_topic
from tests.logdirs.support import replica_slots
from tests.metrics.scrape import Parsed
from tests.metrics.test_http_scrape import scrape
from tests.replication.support import poll


def test_the_lag_is_the_high_watermark_minus_the_committed_offset_never_below_0():
    assert group_lag(1000, 400) == 600
    assert group_lag(1000, 1000) == 0
    assert group_lag(1000, 1500) == 0  # committed past where consumers stop
    assert group_lag(0, 0) == 0
    assert group_lag(None, 400) is None  # not led here, or no replica here
    assert group_lag(-1, 400) is None  # METADATA v1: no replica on this broker
    assert group_lag(1000, None) is None  # no committed offset
    assert group_lag(1000, -1) is None


@pytest.fixture(scope="module")
def two_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lag")
    dirs = [str(root / f"d{i}") for i in range(2)]
    for path in dirs:
        os.mkdir(path)
    broker = ConsoleBroker(
        root, log_dirs=",".join(dirs), num_processors=1,
        # a follower stopped on purpose stays in the ISR (so the high watermark
        # stays where it was) and its writer is not replaced meanwhile
        replica_lag_time_max_ms=120000, worker_heartbeat_timeout_ms=120000,
        http_metrics_lag_interval_ms=0)
    broker.dirs = dirs
    broker.start()
    yield broker
    broker.finish()


def _slots(broker, topic):
    """(leader, follower) slots of ``topic``-0, once both are ONLINE."""
    slots = [s for _, s in replica_slots(broker, topic, 0) if s.state == ONLINE]
    leaders = [s for s in slots if s.role == ROLE_LEADER]
    followers = [s for s in slots if s.role != ROLE_LEADER]
    return (leaders[0], followers[0]) if len(leaders) == 1 and len(followers) == 1 else None


def _errors(got: Parsed, api: str) -> float:
    found = got.series("hostbroker_request_errors_total", api=api)
    return found[0].value if found else 0.0


def test_lag_of_a_replicated_partition_whose_follower_trails(two_dirs):
    broker = two_dirs
    topic, behind, ahead = new_topic("rl"), new_topic("gb"), new_topic("ga")
    first = encode_message_set([b"a" * 200] * 3)
    with broker.client() as c:
        c.create_topic(topic, 1, replication_factor=2)

        def produced():
            try:
                return c.produce(topic, 0, first, acks=-1)
            except Exception:  # noqa: BLE001 - not led yet
                return None

        poll(produced, 30, f"{topic}-0 led and its follower in the ISR")
    poll(lambda: (s := _slots(broker, topic)) and s[0].readable_end == s[0].end_offset > 0,
         30, "the follower caught up")
    _, follower = _slots(broker, topic)
    writer = broker.workers()[f"hb-writer-{follower.owner}"]
    os.kill(writer, signal.SIGSTOP)  # it copies no more: the high watermark stays
    try:
        with broker.client() as c:
            for _ in range(3):
                c.produce(topic, 0, encode_message_set([b"b" * 300] * 4), acks=1)
            leader, _ = _slots(broker, topic)
            hw, leo = leader.readable_end, leader.end_offset
            assert 0 < hw < leo, f"high watermark {hw}, log end {leo}: no follower lag made"
            committed = hw // 3
            c.offset_commit(behind, [(topic, 0, committed, None)])
            c.offset_commit(ahead, [(topic, 0, leo, None)])  # past the high watermark
        got = scrape(broker)
        labels = {"topic": topic, "partition": 0}
        assert got.value("hostbroker_partition_high_watermark", **labels) == hw
        assert got.value("hostbroker_partition_log_end_offset", **labels) == leo
        assert got.value("hostbroker_group_lag_bytes", group=behind, **labels) == hw - committed
        assert got.value("hostbroker_group_lag_bytes", group=ahead, **labels) == 0
        assert got.value("hostbroker_group_committed_offset", group=ahead, **labels) == leo

        page = get(broker, f"/api/group?group={behind}")
        (row,) = page["partitions"]
        assert (row["committed"], row["high_watermark"], row["lag"]) == (
            committed, hw, hw - committed)
        assert page["total_lag"] == hw - committed
        (row,) = get(broker, f"/api/group?group={ahead}")["partitions"]
        assert (row["committed"], row["high_watermark"], row["lag"]) == (leo, hw, 0)

        # a refused change of a topic placed on log dirs is answered by hb-logdirs
        # through the handler: one error of alter_topic
        with broker.client() as c:
            refused = c.alter_topic(topic, set_configs={"min.insync.replicas": "3"},
                                    raise_on_error=False)
        assert refused.error_code == ErrorCode.INVALID_CONFIG, refused
        assert "replication factor" in refused.error_message  # hb-logdirs' check
        assert _errors(scrape(broker), "alter_topic") == _errors(got, "alter_topic") + 1
    finally:
        os.kill(writer, signal.SIGCONT)
    poll(lambda: _slots(broker, topic)[0].readable_end == leo, 30,
         "the follower caught up again")
    got = scrape(broker)
    assert got.value("hostbroker_group_lag_bytes", group=behind, topic=topic,
                     partition=0) == leo - committed
