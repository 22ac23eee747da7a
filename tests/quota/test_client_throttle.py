"""The high-level clients under a quota (docs/security.md, "Quotas"): the
producer sends PRODUCE v1 and the consumers FETCH v2, and their ``stats``
say how long the broker held the answers (Kafka's
``produce-throttle-time-avg/max``, ``fetch-throttle-time-avg/max``).

A real broker whose ``quotas.json`` bounds this test's own principal (its uid
over the Unix socket); each client runs a few seconds, one connection, in
this process. The rate held is measured after :data:`SETTLED_S`, past the
burst a principal's first window lets through (tests/quota/test_quota_broker.py).

The tests with a quota each keep their own broker: the quota is on this
process's uid, which every test of the module is, and a principal's rate
spans windows another test's traffic would fill. The two tests without a
quota share one plain broker (``served``), each on topics and a group of its own.
"""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from hostbroker.client import ConsumerConnector, DeliveryError, Producer, SimpleConsumer
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol import api
from hostbroker.security.principals import user_principal
from hostbroker.security.quota import Quota, QuotaSet
from hostbroker.security.store import write_quotas
from tests.client.fake_broker import FakeBroker
from tests.integration.cli import hostbroker
from tests.integration.wire_helpers import module_broker, new_topic

OWN = str(user_principal(os.geteuid()))  # this test's principal over the Unix socket
TOLERANCE = 1.25  # as tests/quota/test_quota_broker.py
RUN_S = 4.0
SETTLED_S = 1.5
VALUE = b"v" * 20_000
BOUND = 200_000

# No quotas.json: no principal has a quota (the tests without one share it).
served = module_broker()


@pytest.fixture
def own_quota_broker(make_broker, tmp_path):
    """``start(quota)``: a broker whose quota for this test's principal is ``quota``,
    with a topic ``t`` of one partition."""

    def start(quota: Quota, name: str = "broker", **settings):
        root = tmp_path / name
        logs = root / "logs"
        logs.mkdir(parents=True)
        write_quotas(str(logs), QuotaSet({OWN: quota}))
        broker = make_broker(root, **settings)
        with broker.client() as c:
            c.create_topic("t", 1)
        return broker

    return start


def settled_rate(marks: list[tuple[float, int]]) -> float:
    """Bytes a second from the first mark at or after SETTLED_S to the last."""
    settled = next(m for m in marks if m[0] >= SETTLED_S)
    last = marks[-1]
    return (last[1] - settled[1]) / (last[0] - settled[0])


def test_the_producer_reads_its_throttle_time_and_keeps_near_its_quota(own_quota_broker,
                                                                        caplog):
    broker = own_quota_broker(Quota(producer_byte_rate=BOUND))
    marks: list[tuple[float, int]] = []
    caplog.set_level(logging.INFO, logger="hostbroker.client.producer")
    with Producer(broker.unix, producer_type="sync") as producer:
        assert producer.stats["produce-throttle-time-max"] == 0
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < RUN_S:
            producer.send("t", VALUE)
            sent += len(VALUE)
            marks.append((time.monotonic() - start, sent))
        stats = producer.stats
    assert stats["produce-throttle-time-max"] > 0, stats
    assert 0 < stats["produce-throttle-time-avg"] <= stats["produce-throttle-time-max"]
    rate = settled_rate(marks)
    assert BOUND * 0.5 <= rate <= BOUND * TOLERANCE, rate
    held = [r for r in caplog.records if "for this client's quota" in r.getMessage()]
    assert len(held) == 1 and held[0].levelno == logging.INFO  # said once
    assert broker.unix in held[0].getMessage()


def test_a_producer_without_a_quota_is_never_held(served):
    broker = served
    topic = new_topic("free")
    with Producer(broker.unix, producer_type="sync") as producer:
        for _ in range(20):
            producer.send(topic, VALUE)
        stats = producer.stats
    assert stats["acknowledged"] == 20
    assert stats["produce-throttle-time-avg"] == stats["produce-throttle-time-max"] == 0


def _fill(broker, sets: int) -> None:
    """``sets`` sets of one VALUE in ``t`` (the producer's quota is not bounded)."""
    with broker.client() as c:
        for _ in range(sets):
            c.produce("t", 0, encode_message_set([VALUE]))


def test_the_simple_consumer_reads_its_throttle_time_and_keeps_near_its_quota(
        own_quota_broker):
    broker = own_quota_broker(Quota(consumer_byte_rate=BOUND))
    _fill(broker, 60)  # 1.2 MB: past what the quota lets through in RUN_S, from the start
    marks: list[tuple[float, int]] = []
    with SimpleConsumer(broker.unix, fetch_size=50_000, fetch_wait_max_ms=0) as consumer:
        start = time.monotonic()
        got = offset = 0
        while time.monotonic() - start < RUN_S:
            fetched = consumer.fetch("t", 0, offset)
            got += len(fetched.message_set)
            offset = fetched.next_offset if not fetched.at_end else 0
            marks.append((time.monotonic() - start, got))
        stats = consumer.stats
    assert stats["fetch-throttle-time-max"] > 0, stats
    assert 0 < stats["fetch-throttle-time-avg"] <= stats["fetch-throttle-time-max"]
    rate = settled_rate(marks)
    assert BOUND * 0.5 <= rate <= BOUND * TOLERANCE, rate


def test_the_high_level_consumer_reads_its_throttle_time_and_keeps_near_its_quota(
        own_quota_broker):
    broker = own_quota_broker(Quota(consumer_byte_rate=BOUND))
    _fill(broker, 70)  # 1.4 MB: past what the quota lets through in RUN_S, from the start
    marks: list[tuple[float, int]] = []
    connector = ConsumerConnector(broker.unix, group_id="g", auto_offset_reset="earliest",
                                  consumer_timeout_ms=2000, fetch_size=50_000)
    try:
        (stream,) = connector.create_message_streams({"t": 1})["t"]
        start = time.monotonic()
        got = 0
        for message in stream:
            got += len(message.value)
            marks.append((time.monotonic() - start, got))
            if marks[-1][0] >= RUN_S:
                break
        stats = connector.stats
    finally:
        connector.shutdown()
    assert got < 70 * len(VALUE)  # held: without the quota all of it comes in well under RUN_S
    assert stats["fetch-throttle-time-max"] > 0, stats
    rate = settled_rate(marks)
    assert BOUND * 0.5 <= rate <= BOUND * TOLERANCE, rate


# A hold longer than the clients' socket timeouts (scaled down from the
# defaults: a 30 s cap, 10 s timeouts) but within the broker's cap.
HOLD_CAP_MS = 6000
SMALL_BOUND = 20_000


def test_a_produce_held_past_the_request_timeout_is_written_once(own_quota_broker):
    """300 kB under 20 kB/s: the answer is held the broker's cap, longer than
    request.timeout.ms; the producer waits for it instead of sending the
    message again (each copy held again, the log holding it four times)."""
    broker = own_quota_broker(Quota(producer_byte_rate=SMALL_BOUND),
                              quota_max_throttle_ms=HOLD_CAP_MS)
    start = time.monotonic()
    with Producer(broker.unix, producer_type="sync", request_timeout_ms=2000,
                  quota_max_throttle_ms=HOLD_CAP_MS) as producer:
        producer.send("t", b"v" * 300_000)
        stats = producer.stats
    assert time.monotonic() - start < 20
    assert stats["retries"] == 0 and stats["requests"] == 1, stats
    assert stats["produce-throttle-time-max"] > 2000, stats
    with broker.client() as c:
        log_end = c.fetch("t", 0, 0, 1).log_end_offset
    assert log_end == 300_000 + 10  # one entry (its 10 bytes of header), not one per attempt


def test_a_new_consumers_held_first_fetch_is_answered(own_quota_broker):
    """A consumer quota far below fetch.size / the hold: the first answer on a
    new connection comes after the setup timeout, and is still taken."""
    broker = own_quota_broker(Quota(consumer_byte_rate=SMALL_BOUND),
                              quota_max_throttle_ms=HOLD_CAP_MS)
    with broker.client() as c:
        for _ in range(10):
            c.produce("t", 0, encode_message_set([b"v" * 100_000]))
    options = dict(fetch_size=1_100_000, fetch_wait_max_ms=0, socket_timeout_ms=2000,
                   socket_connection_setup_timeout_ms=2000, quota_max_throttle_ms=HOLD_CAP_MS)
    with SimpleConsumer(broker.unix, **options) as first:
        first.fetch("t", 0, 0)  # (the principal's burst: the next is held)
    start = time.monotonic()
    with SimpleConsumer(broker.unix, **options) as second:
        fetched = second.fetch("t", 0, 0)
        stats = second.stats
    assert time.monotonic() - start < 20
    assert len(fetched.message_set) > 0
    assert stats["fetch-throttle-time-max"] > 2000, stats


def test_a_broker_refusing_the_versions_is_a_clear_error():
    """A broker that answers PRODUCE v1 and FETCH v2 with an error frame of
    UNSUPPORTED_VERSION (not one of ours: all of ours take them)."""
    def answer(header, request):
        if isinstance(request, api.MetadataRequest):  # topic t of one partition
            return api.encode_response(header.correlation_id, api.MetadataResponse(0, (), (
                api.MetadataTopic("t", 0, (api.MetadataPartition(0, 0, 0, 0, 0, None),)),)))
        return api.encode_error_frame(header.correlation_id, ErrorCode.UNSUPPORTED_VERSION)

    broker = FakeBroker(answer)
    try:
        with pytest.raises(DeliveryError) as caught:
            with Producer(broker.uri, producer_type="sync",
                          message_send_max_retries=0) as producer:
                producer.send("t", b"x")
        assert "does not take PRODUCE version 1" in str(caught.value.failures[0].error)
        with SimpleConsumer(broker.uri) as consumer:
            with pytest.raises(Exception, match="does not take FETCH version 2"):
                consumer.fetch("t", 0, 0)
    finally:
        broker.close()


def test_perf_reports_the_throttle_time(own_quota_broker):
    """``perf produce`` and ``perf consume`` print what their clients were held
    (each against a broker of its own: a principal's rate is measured from the
    oldest window that counted any of its traffic, so a consume right after a
    bounded produce could pass under its bound)."""
    broker = own_quota_broker(Quota(producer_byte_rate=BOUND))
    produced = hostbroker("perf", "produce", "--bootstrap", broker.unix, "--topic", "t",
                          "--messages", "30", "--size", str(len(VALUE)), "--batch-size", "2",
                          "--json")
    assert produced.returncode == 0, produced.stderr
    held = json.loads(produced.stdout)["throttle_time_ms"]
    assert held["max"] > 0 and 0 < held["avg"] <= held["max"], held
    broker = own_quota_broker(Quota(consumer_byte_rate=BOUND), "consumed")
    _fill(broker, 30)
    consumed = hostbroker("perf", "consume", "--bootstrap", broker.unix, "--topic", "t",
                          "--messages", "30", "--fetch-size", "50000")
    assert consumed.returncode == 0, consumed.stderr
    assert "fetch throttle time ms (held by the broker for a quota): avg" in consumed.stdout.decode()


def test_throttle_stats_average_every_answer_and_say_the_first_hold_once(caplog):
    from hostbroker.client.throttle_stats import ThrottleStats

    stats = ThrottleStats("fetch", logging.getLogger("hostbroker.client.consumer"))
    assert stats.stats() == {"fetch-throttle-time-avg": 0.0, "fetch-throttle-time-max": 0}
    caplog.set_level(logging.INFO, logger="hostbroker.client.consumer")
    for held in (0, 100, 50, 0, -7):  # (a negative one: 0)
        stats.record(held, "unix:///b.sock")
    assert stats.stats() == {"fetch-throttle-time-avg": 30.0, "fetch-throttle-time-max": 100}
    assert stats.answers == 5 and stats.totals() == (5, 150, 100)
    assert [r.getMessage() for r in caplog.records] == [
        "the broker at unix:///b.sock held a FETCH answer 100 ms for this client's quota "
        "(fetch-throttle-time-avg and -max in the client's stats)"]


def test_throttle_stats_are_over_two_samples_of_30_s_as_kafkas():
    from hostbroker.client.throttle_stats import ThrottleStats

    now = [0.0]
    stats = ThrottleStats("produce", logging.getLogger("test"), clock=lambda: now[0])
    stats.record(1000, "u")   # sample 1 begins at 0
    now[0] = 31.0
    stats.record(0, "u")      # sample 2 begins at 31
    assert stats.stats() == {"produce-throttle-time-avg": 500.0,
                             "produce-throttle-time-max": 1000}
    now[0] = 59.0             # sample 1 began 59 s ago: still counted
    assert stats.stats()["produce-throttle-time-max"] == 1000
    now[0] = 60.0             # ... and now dropped: the episode is over
    assert stats.stats() == {"produce-throttle-time-avg": 0.0, "produce-throttle-time-max": 0}
    now[0] = 62.0
    stats.record(20, "u")     # sample 3 begins, sample 2 still counted
    assert stats.stats() == {"produce-throttle-time-avg": 10.0, "produce-throttle-time-max": 20}
    now[0] = 200.0
    assert stats.stats()["produce-throttle-time-max"] == 0
    assert stats.totals() == (3, 1020, 1000)  # the lifetime, for a report over a run


def test_a_stopping_housekeeping_fetcher_hands_its_housekeeping_on(served):
    """Of two fetchers, the first (the housekeeping one) stops on a refused
    version: the second takes the housekeeping; the streams of the first raise."""
    from hostbroker.client.group import RoundRobinAssignor
    from hostbroker.client.throttle_stats import VersionRefusedError

    broker = served
    topic = new_topic("housekeeping")
    with broker.client() as c:
        c.create_topic(topic, 2)
    connector = ConsumerConnector(broker.unix, group_id=new_topic("housekeeping-g"),
                                  assignor=RoundRobinAssignor(),
                                  num_consumer_fetchers=2, consumer_timeout_ms=3000,
                                  auto_offset_reset="earliest")
    try:
        streams = connector.create_message_streams({topic: 2})[topic]
        first, second = connector._fetchers
        assert first.housekeeping and not second.housekeeping
        deadline = time.monotonic() + 5
        while not first.streams and time.monotonic() < deadline:  # (its thread takes them)
            time.sleep(0.01)
        refused = VersionRefusedError(ErrorCode.UNSUPPORTED_VERSION, "refused")
        first._stop_on(refused)
        first.stop()
        assert second.housekeeping and not first.housekeeping
        failed = [s for s in streams if set(s.partitions) & set(first.streams)]
        with pytest.raises(VersionRefusedError):
            next(iter(failed[0]))
    finally:
        connector.shutdown()
