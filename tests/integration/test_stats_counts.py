"""The per-partition and per-API stats of a real broker (shm/stats.py), read as
the HTTP worker and ``hostbroker top`` read them: a known produce and fetch
give known counts, an error answer counts an error, latencies land in their
buckets. Twice: with the processors' own ways (local answers, PUTs, local
fetches, GROUP_PUTs) and with every request through the handlers.

The tests of each way share one broker (``counted`` is module-scoped): each has its own
topics, and reads the per-API counts as differences from a reading taken at its start.
The deleted-topic test keeps its own broker, so that its slot is the one reused.
"""

from __future__ import annotations

import time

import pytest

from hostbroker.config import Config
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from hostbroker.protocol.api import ApiKey
from hostbroker.shm import stats
from hostbroker.shm.partitions import PartitionTable
from hostbroker.workers.plan import BrokerPlan
from hostbroker.workers.stats_record import attach_stats
from tests.integration.broker import Broker
from tests.integration.wire_helpers import new_topic, stop_or_kill

THROUGH_HANDLERS = {"processor.local.requests": "false", "processor.local.fetch": "false",
                    "processor.direct.produce": "false", "processor.direct.groups": "false",
                    "produce.direct.answers": "false", "fetch.writer.polls": "false"}


class Stats:
    """Every process's stats of one broker, summed (as a reader sums them)."""

    def __init__(self, broker):
        config = Config.build(overrides=[f"{k}={broker.settings[k]}" for k in (
            "log.dirs", "num.processors", "num.handlers", "max.partitions")])
        self.plan = BrokerPlan.from_config(config)
        self.partitions, self.apis = attach_stats(self.plan, self.plan.workers())
        self.table = PartitionTable.attach(self.plan.table_name, readonly=True)

    def close(self):
        for handle in self.partitions + self.apis + [self.table]:
            handle.close()

    def partition(self, topic: str, partition: int) -> tuple[int, int, int, int]:
        for slot, s in self.table.scan():
            if (s.name, s.partition) == (topic, partition):
                totals = stats.partition_totals(self.partitions, slot + 1)
                return tuple(totals[slot * 4:slot * 4 + 4])
        raise AssertionError(f"{topic}-{partition} not in the table")

    def api(self, key: int) -> tuple[int, int, int, tuple[int, ...]]:
        merged = stats.merge_api(a.snapshot() for a in self.apis)
        return merged.get(key, (0, 0, 0, (0,) * stats.BUCKET_COUNT))

    def start(self) -> dict:
        """Every API's counts once they stay still for 0.1 s: what the shared broker
        counted before the test (an earlier test's last answers counted too)."""
        last = None
        while True:
            now = {key: self.api(key) for key in ApiKey}
            if now == last:
                return now
            last = now
            time.sleep(0.1)

    def api_since(self, key: int, start: dict) -> tuple[int, int, int, tuple[int, ...]]:
        """What ``api(key)`` counted since the reading ``start`` (requests, errors,
        latency sum, cumulative buckets)."""
        (r, e, ns, buckets), (r0, e0, ns0, buckets0) = self.api(key), start[key]
        return r - r0, e - e0, ns - ns0, tuple(b - b0 for b, b0 in zip(buckets, buckets0))


def wait_for(check, timeout: float = 10.0):
    """``check()``'s value once it is truthy (answers are counted as the processor
    hands them over, a moment before or after the client reads them)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


@pytest.fixture(scope="module", params=["processors", "handlers"])
def counted(request, tmp_path_factory):
    """One broker (and its stats reader) per way, shared by the tests of that way."""
    settings = {} if request.param == "processors" else THROUGH_HANDLERS
    broker = Broker(tmp_path_factory.mktemp("hb"),
                    **{k.replace(".", "_"): v for k, v in settings.items()}).start()
    reader = Stats(broker)
    yield broker, reader
    reader.close()
    stop_or_kill(broker)


def test_a_known_produce_and_fetch_give_known_counts(counted):
    broker, reader = counted
    topic = new_topic("counted")
    start = reader.start()
    a_set = encode_message_set([b"m" * 100] * 10)
    one = encode_message_set([b"x" * 50] * 5)
    with broker.client() as c:
        c.create_topic(topic, 2)
        for _ in range(3):
            c.produce(topic, 0, a_set, acks=-1)
        c.produce(topic, 1, one, acks=1)  # a lone one: a PUT where processors may
        got = c.fetch(topic, 0, 0, 1 << 20)
        both = c.fetch_many([(topic, 0, 0, 1 << 20), (topic, 1, 0, 1 << 20)])
    assert len(got.message_set) == 3 * len(a_set)
    assert wait_for(lambda: reader.partition(topic, 0)[stats.FETCHES] == 2)
    assert reader.partition(topic, 0) == (30, 3 * len(a_set), 2 * len(got.message_set), 2)
    assert reader.partition(topic, 1) == (5, len(one), len(both[1].message_set), 1)
    assert wait_for(lambda: reader.api_since(ApiKey.PRODUCE, start)[0] == 4)
    assert wait_for(lambda: reader.api_since(ApiKey.FETCH, start)[0] == 2)
    requests, errors, sum_ns, buckets = reader.api_since(ApiKey.PRODUCE, start)
    assert errors == 0 and sum_ns > 0 and buckets[-1] <= requests
    assert list(buckets) == sorted(buckets)  # cumulative
    assert list(reader.api(ApiKey.PRODUCE)[3]) == sorted(reader.api(ApiKey.PRODUCE)[3])


def test_an_error_answer_counts_an_error(counted):
    broker, reader = counted
    errs, nothing_here = new_topic("errs"), new_topic("nothing-here")
    start = reader.start()
    with broker.client() as c:
        c.create_topic(errs, 1)
        c.produce(errs, 0, encode_message_set([b"ok"]), acks=-1)
        c.fetch(errs, 0, 0, 1 << 20)
        missing = c.fetch(nothing_here, 0, 0, 1024, raise_on_error=False)
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        bad = c.produce(errs, 7, encode_message_set([b"no"]), acks=1, raise_on_error=False)
        assert bad.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert c.offsets(errs, 3, raise_on_error=False) == ()
        c.offsets(errs, 0)
    assert wait_for(lambda: reader.api_since(ApiKey.FETCH, start)[:2] == (2, 1))
    assert wait_for(lambda: reader.api_since(ApiKey.PRODUCE, start)[:2] == (2, 1))
    assert wait_for(lambda: reader.api_since(ApiKey.OFFSETS, start)[:2] == (2, 1))
    # a partition that does not exist is counted nowhere; the good one once
    assert reader.partition(errs, 0)[stats.FETCHES] == 1


def test_latencies_land_in_their_buckets(counted):
    broker, reader = counted
    slow = new_topic("slow")
    start = reader.start()
    with broker.client() as c:
        c.create_topic(slow, 1)
        for _ in range(5):
            c.metadata([slow])
        started = time.monotonic()
        # nothing to read: the broker holds it its whole max wait (300 ms)
        c.fetch(slow, 0, 0, 1024, max_wait_ms=300, min_bytes=1)
        assert time.monotonic() - started >= 0.29
    assert wait_for(lambda: reader.api_since(ApiKey.METADATA, start)[0] >= 5)
    requests, _, sum_ns, buckets = reader.api_since(ApiKey.FETCH, start)
    assert requests == 1
    at_250ms = stats.LATENCY_BOUNDS.index(0.25)
    assert buckets[at_250ms] == 0  # it took longer than 0.25 s
    assert sum_ns >= 290_000_000
    requests, _, sum_ns, buckets = reader.api_since(ApiKey.METADATA, start)
    # five quick ones on an idle broker: each well under 2.5 s, the sum their sum
    assert buckets[-1] == requests and 0 < sum_ns < requests * 2_500_000_000


def test_a_deleted_topics_slot_starts_from_zero(make_broker):
    # Its own broker: on a fresh one, "fresh" takes the slot "gone" left.
    broker = make_broker()
    reader = Stats(broker)
    try:
        with broker.client() as c:
            c.create_topic("gone", 1)
            c.produce("gone", 0, encode_message_set([b"a" * 10] * 4), acks=-1)
            c.fetch("gone", 0, 0, 1 << 20)
            assert wait_for(lambda: reader.partition("gone", 0)[stats.FETCHES] == 1)
            slot = next(i for i, s in reader.table.scan() if s.name == "gone")
            c.delete_topic("gone")
            assert wait_for(lambda: all(s.name != "gone" for _, s in reader.table.scan()))
            totals = stats.partition_totals(reader.partitions, slot + 1)
            assert totals[slot * 4:slot * 4 + 4] == [0, 0, 0, 0]
            c.create_topic("fresh", 1)
            assert wait_for(lambda: any(s.name == "fresh" for _, s in reader.table.scan()))
            assert reader.partition("fresh", 0) == (0, 0, 0, 0)
    finally:
        reader.close()
