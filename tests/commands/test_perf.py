"""perf's arithmetic: percentiles, shares, merging the processes' results, limits."""

from __future__ import annotations

import json

import pytest

from hostbroker.exits import EXIT_USAGE, CommandError
from hostbroker.commands.perf import (
    WorkerResult,
    check_limits,
    format_report,
    payload_of,
    percentile,
    shares,
    summarize,
)


def test_nearest_rank_percentiles():
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 99.9) == 100
    assert percentile(values, 100) == 100
    assert percentile(values, 0) == 1
    assert percentile([7.0], 99.9) == 7.0
    thousand = [float(v) for v in range(1000)]
    assert percentile(thousand, 99.9) == 998  # rank ceil(999.0) = 999
    assert percentile(thousand, 99) == 989
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_shares_add_up_and_differ_by_at_most_one():
    assert shares(10, 3) == [4, 3, 3]
    assert shares(3, 3) == [1, 1, 1]
    for total, parts in [(1000, 7), (5, 1), (64, 64)]:
        split = shares(total, parts)
        assert sum(split) == total and max(split) - min(split) <= 1


def test_summary_merges_processes_on_one_clock():
    a = WorkerResult(messages=300, payload_bytes=300_000, started=10.0, ended=11.0,
                     latencies=[0.001] * 98 + [0.010, 0.020])
    b = WorkerResult(messages=200, payload_bytes=200_000, started=10.5, ended=12.0,
                     latencies=[0.002] * 100)
    report = summarize("produce", [a, b], processes=2, size=1000)
    assert report["messages"] == 500 and report["payload_bytes"] == 500_000
    assert report["elapsed_s"] == 2.0  # first start to last end
    assert report["records_per_s"] == 250.0
    assert report["mb_per_s"] == 0.25  # MB = 10^6 bytes of payload
    assert report["requests"] == 200
    # 98 x 1 ms, 100 x 2 ms, 10 ms, 20 ms: rank 198 of 200 is still 2 ms.
    assert report["latency_ms"] == {"p50": 2.0, "p99": 2.0, "p99.9": 20.0, "max": 20.0}
    assert "error" not in report
    json.dumps(report)
    text = format_report(report)
    assert "records/s: 250.0  MB/s: 0.250 (MB = 10^6 bytes of payload)" in text
    assert "request latency ms over 200 requests: p50 2.000  p99 2.000  p99.9 20.000" in text


def test_summary_averages_the_throttle_times_over_every_answer_of_every_process():
    import logging

    from hostbroker.client.throttle_stats import ThrottleStats

    a, b = WorkerResult(started=1.0, ended=2.0), WorkerResult(started=1.0, ended=2.0)
    for result, held in ((a, (0, 300)), (b, (0, 0, 0, 100))):
        stats = ThrottleStats("fetch", logging.getLogger("test"))
        for ms in held:
            stats.record(ms, "u")
        result.held(stats)
    report = summarize("consume", [a, b])
    assert report["throttle_time_ms"] == {"avg": round(400 / 6, 3), "max": 300}
    assert "fetch throttle time ms (held by the broker for a quota): avg 66.667  max 300" \
        in format_report(report)


def test_no_acknowledgements_means_no_latency_and_errors_are_kept():
    report = summarize("produce", [WorkerResult(messages=5, started=1.0, ended=2.0),
                                   WorkerResult(started=1.0, ended=2.0, failed=3, error="boom")])
    assert report["latency_ms"] is None and report["requests"] == 0
    assert report["failed"] == 3 and report["error"] == "boom"
    assert "none measured (no request was answered)" in format_report(report)


def test_limits_refuse_with_the_option_named():
    check_limits(messages=1, size=0, processes=64, batch_size=None)
    with pytest.raises(CommandError) as refused:
        check_limits(processes=65)
    assert refused.value.status == 2
    assert str(refused.value) == "--processes must be between 1 and 64, not 65"
    with pytest.raises(CommandError):
        check_limits(size=-1)


def test_payload_is_letters_of_the_size_asked():
    assert len(payload_of(1000)) == 1000 and payload_of(1000).isalpha()
    assert payload_of(0) == b""


@pytest.mark.parametrize("acks", [0, "0"])  # --acks 0, or --property request.required.acks=0
def test_acks_zero_is_named_as_the_reason_for_no_latency(acks):
    report = summarize("produce", [WorkerResult(messages=5, started=1.0, ended=2.0)],
                       settings={"request.required.acks": acks})
    assert "acks=0: the broker does not answer" in format_report(report)


def test_a_size_over_message_max_bytes_is_refused_before_any_work():
    from hostbroker.commands.perf import produce

    # No broker listens there: the refusal must come before any connection.
    nowhere = "tcp://127.0.0.1:1"
    with pytest.raises(CommandError, match=r"--size 1,000,000 is over message.max.bytes = "
                                           r"1,000,000 \(at most 999,994 bytes") as caught:
        produce("t", messages=1, size=1_000_000, bootstrap=nowhere)
    assert caught.value.status == EXIT_USAGE
    with pytest.raises(CommandError, match="over message.max.bytes = 2,000"):
        produce("t", messages=1, size=1995, bootstrap=nowhere,
                properties=["message.max.bytes=2000"])
