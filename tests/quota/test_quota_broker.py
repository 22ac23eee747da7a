"""Quotas enforced by a real broker (docs/security.md, "Quotas"): its
``quotas.json`` written into the first log dir before it starts, a greedy
client in its own process over TCP (``User:ANONYMOUS``) and a polite one over
the Unix socket (the test's own uid: its own principal).

Each greedy run is bounded (a few seconds, one connection). The rate held
is measured after :data:`SETTLED_S`: a principal's first window lets a
burst through (its rate is measured from the start of the window of its
first request, which may be a second earlier), as in Kafka; from then on
what it gets is its bound, within :data:`TOLERANCE`.

Every test keeps its own broker: each bounds ``User:ANONYMOUS`` (every TCP
client of the broker), the default, this process's uid or the published
quotas, all broker-wide, each its own way and from its first window, and some
count every principal's rows (``used_rows``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hostbroker.config import Config
from hostbroker.log.message import encode_message_set
from hostbroker.security.principals import user_principal
from hostbroker.security.quota import DEFAULT_ENTITY, Quota, QuotaSet
from hostbroker.security.store import encode_published, write_quotas
from hostbroker.shm.published import PublishedDocument
from hostbroker.shm.quotas import QuotaCounters, principal_key
from hostbroker.workers.plan import BrokerPlan
from tests.quota.greedy import SET

GREEDY_S = 4.0
SETTLED_S = 1.5  # the greedy client's rate is measured from here to its end
TOLERANCE = 1.25
WINDOW_S = 1.0  # quota.window.size.seconds, the default
OWN = str(user_principal(os.geteuid()))  # the principal of this test over the Unix socket
SMALL = encode_message_set([b"polite" * 10])
POLITE_REQUESTS = 200
ATTEMPTS = 3


@pytest.fixture
def quota_broker(make_broker, tmp_path):
    """``quota_broker(entities)``: a broker started with those quotas."""

    def start(entities: dict[str, Quota], **settings):
        logs = tmp_path / "logs"
        logs.mkdir(exist_ok=True)
        if entities is not None:
            write_quotas(str(logs), QuotaSet(entities))
        broker = make_broker(**settings)
        with broker.client() as c:
            c.create_topic("greedy", 1)
            c.create_topic("polite", 1)
        return broker

    return start


def greedy(broker, kind: str, seconds: float = GREEDY_S) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-m", "tests.quota.greedy", broker.tcp, kind,
                             str(seconds)], stdout=subprocess.PIPE, env=env, text=True)


def outcome(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    result = json.loads(out)
    marks = result.pop("marks")
    settled = next(m for m in marks if m[0] >= SETTLED_S)
    last = marks[-1]
    result["rate"] = (last[1] - settled[1]) / (last[0] - settled[0])
    result["request_rate"] = (last[2] - settled[2]) / (last[0] - settled[0])
    # The broker holds a principal to its bound over the span from the start of its
    # oldest window, at most one window before its first request: the rate over
    # that span, at each answer after SETTLED_S, is the second view of what it got.
    later = [m for m in marks if m[0] >= SETTLED_S]
    result["span_rate"] = max(m[1] / (m[0] + WINDOW_S) for m in later)
    result["span_request_rate"] = max(m[2] / (m[0] + WINDOW_S) for m in later)
    # Each view is off one way: the rate after SETTLED_S when other work slowed the
    # client early on (it catches up to the bound's average), the span's when the
    # first window's burst is in it. A broker that holds nobody is far past both.
    result["held_rate"] = min(result["rate"], result["span_rate"])
    result["held_request_rate"] = min(result["request_rate"], result["span_request_rate"])
    result["whole_rate"] = result["moved"] / result["elapsed"]
    return result


def polite_latencies(broker, n: int = POLITE_REQUESTS) -> list[float]:
    """Latency of ``n`` small PRODUCE v1s over the Unix socket, one at a time,
    each answered with a throttle time of 0 (no quota applies)."""
    out = []
    with broker.client() as c:
        c.produce("polite", 0, SMALL, version=1)
        for _ in range(n):
            start = time.perf_counter()
            c.produce("polite", 0, SMALL, version=1)
            out.append(time.perf_counter() - start)
            assert c.throttle_time_ms == 0
    return out


def p99(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.99) - 1]


def counters(broker) -> QuotaCounters:
    plan = BrokerPlan.from_config(Config.build(overrides=broker._naming()))
    return QuotaCounters.attach(plan.quotas_name, readonly=True)


def used_rows(broker) -> int:
    table = counters(broker)
    try:
        return sum(table.used_rows(p) for p in range(table.parts))
    finally:
        table.close()


def test_a_greedy_producer_is_held_to_its_rate_and_another_principal_is_not_slowed(
        quota_broker):
    """The other principal's p99 is taken alone, then while the greedy one
    runs; on two cores shared with other work one pair can be off by
    scheduling alone, so up to ATTEMPTS pairs are taken (a slowdown the
    greedy client caused would show in every one)."""
    bound = 200_000
    # one processor: the greedy and the polite connections share its loop
    broker = quota_broker({"User:ANONYMOUS": Quota(producer_byte_rate=bound)},
                          num_processors=1)
    pairs = []
    for _ in range(ATTEMPTS):
        alone = p99(polite_latencies(broker))
        proc = greedy(broker, "produce")
        time.sleep(1.0)  # past the first window's burst: the greedy one is held by now
        during = p99(polite_latencies(broker))
        result = outcome(proc)
        assert result["held_rate"] <= bound * TOLERANCE, result
        assert result["rate"] >= bound * 0.5, result["rate"]
        assert max(result["throttles"]) > 0
        assert all(0 <= t <= 30_000 for t in result["throttles"])
        pairs.append((alone, during))
        # within twice its latency alone (2 ms at least: the cores are shared)
        if during <= 2 * max(alone, 0.002):
            break
    else:
        raise AssertionError(f"p99 alone and during, each attempt: {pairs}")


def test_a_principal_on_two_processors_is_held_to_its_rate_as_a_whole(quota_broker):
    """Two greedy clients of one principal, one on each processor (the
    acceptor gives a new connection to the one with fewer): together they
    get the bound, as each processor reads the other's counts."""
    bound = 200_000
    broker = quota_broker({"User:ANONYMOUS": Quota(producer_byte_rate=bound)})
    procs = [greedy(broker, "produce"), greedy(broker, "produce")]
    results = [outcome(p) for p in procs]
    assert sum(r["rate"] for r in results) <= bound * TOLERANCE, results
    assert all(r["rate"] > 0 and max(r["throttles"]) > 0 for r in results)
    table = counters(broker)
    try:
        shares = [table.counted(p, principal_key("User:ANONYMOUS"), time.monotonic())[0]
                  for p in range(table.parts)]
    finally:
        table.close()
    assert len(shares) == 2 and min(shares) > 0, shares  # counted on both


@pytest.mark.parametrize("kind", ["fetch", "fetch0"])
def test_a_greedy_consumer_is_held_to_its_rate(quota_broker, kind):
    """FETCH v2 (through the handler) says how long; v0 (answered by the
    processor itself) is held as long, silently."""
    bound = 400_000
    broker = quota_broker({"User:ANONYMOUS": Quota(consumer_byte_rate=bound)})
    with broker.client() as c:  # (no quota for this principal: filled at once)
        for _ in range(60):
            c.produce("greedy", 0, SET)
    result = outcome(greedy(broker, kind))
    assert result["held_rate"] <= bound * TOLERANCE, result
    assert result["rate"] >= bound * 0.5, result["rate"]
    if kind == "fetch":
        assert result["throttles"][0] == 0 and max(result["throttles"]) > 0


def test_a_request_flood_is_held_to_its_request_rate(quota_broker):
    bound = 40
    broker = quota_broker({"User:ANONYMOUS": Quota(request_rate=bound)})
    result = outcome(greedy(broker, "metadata", 3.0))  # version 0: held silently
    assert result["held_request_rate"] <= bound * TOLERANCE, result
    assert result["request_rate"] >= bound * 0.5, result


def test_the_default_applies_to_principals_without_their_own(quota_broker):
    bound = 100_000
    broker = quota_broker({DEFAULT_ENTITY: Quota(producer_byte_rate=bound),
                           OWN: Quota(producer_byte_rate=10**9)})
    proc = greedy(broker, "produce", 3.0)
    sent = 0
    with broker.client() as c:  # this principal's own quota: far above what it sends
        start = time.monotonic()
        while time.monotonic() - start < 2.0:
            c.produce("polite", 0, SET, version=1)
            sent += len(SET)
            assert c.throttle_time_ms == 0
    result = outcome(proc)
    assert sent / 2.0 > 2 * bound  # faster than the default allows, never held
    assert result["held_rate"] <= bound * TOLERANCE and max(result["throttles"]) > 0
    assert used_rows(broker) >= 2  # both counted: each has a quota


def test_no_quota_for_a_principal_counts_nothing(quota_broker):
    broker = quota_broker({"User:somebody-else": Quota(producer_byte_rate=1000)})
    for uri in (broker.tcp, broker.unix):
        with broker.client(uri) as c:
            for _ in range(20):
                c.produce("polite", 0, SET, version=1)
                assert c.throttle_time_ms == 0
                c.fetch("polite", 0, 0, 100_000, version=2)
                assert c.throttle_time_ms == 0
                c.metadata(["polite"])
    assert used_rows(broker) == 0


def test_a_produce_over_the_quota_with_version_0_is_held_silently(quota_broker):
    broker = quota_broker({"User:ANONYMOUS": Quota(producer_byte_rate=20_000)})
    with broker.client(broker.tcp) as c:
        c.produce("greedy", 0, SET)  # a window's worth at once: the next answer waits
        start = time.monotonic()
        c.produce("greedy", 0, SET)
        held = time.monotonic() - start
        assert c.throttle_time_ms is None  # version 0 carries none
    # (40 KB over the first second against 20 KB/s: about a second)
    assert held >= 0.5, held


def test_quotas_published_while_running_reach_open_connections(quota_broker):
    """A change of the published quotas (what ALTER_QUOTAS will publish; here
    written into the broker's shared document as its handler would) meters an
    open connection, and removing the quota frees it again."""
    broker = quota_broker(None)
    plan = BrokerPlan.from_config(Config.build(overrides=broker._naming()))
    document = PublishedDocument.attach(plan.access_name)
    try:
        with broker.client(broker.tcp) as c:
            c.produce("greedy", 0, SET, version=1)
            assert c.throttle_time_ms == 0 and used_rows(broker) == 0
            document.publish(encode_published(
                [], QuotaSet({"User:ANONYMOUS": Quota(producer_byte_rate=10_000)})))
            time.sleep(1.5)  # (looked at within a second)
            throttles = []
            for _ in range(3):
                c.produce("greedy", 0, SET, version=1)
                throttles.append(c.throttle_time_ms)
            assert max(throttles) > 0 and used_rows(broker) == 1
            document.publish(encode_published([], QuotaSet()))
            time.sleep(1.5)
            c.produce("greedy", 0, SET, version=1)  # (the last one held may still be out)
            c.produce("greedy", 0, SET, version=1)
            assert c.throttle_time_ms == 0
    finally:
        document.close()


@pytest.mark.parametrize("version", [0, 1])
def test_large_produce_frames_received_into_their_ring_record_are_counted(quota_broker,
                                                                          version):
    """A frame of 64 KiB or more is received straight into its ring record (or
    a writer's put ring, version 0): counted as any other."""
    bound = 100_000
    broker = quota_broker({"User:ANONYMOUS": Quota(producer_byte_rate=bound)})
    large = encode_message_set([b"L" * 20_000] * 10)  # about 200 KB
    with broker.client(broker.tcp) as c:
        c.produce("greedy", 0, large, version=version)
        start = time.monotonic()
        c.produce("greedy", 0, large, version=version)
        held = time.monotonic() - start
        if version:
            assert c.throttle_time_ms >= 1000
    # (400 KB over the first second against 100 KB/s: about three seconds)
    assert held >= 1.0, held
    table = counters(broker)
    try:
        produce, _, requests, span = table.rates(principal_key("User:ANONYMOUS"),
                                                 time.monotonic())
    finally:
        table.close()
    assert produce * span >= 2 * len(large) and requests * span >= 2
