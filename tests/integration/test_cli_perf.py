"""``hostbroker perf produce`` / ``perf consume`` as subprocesses against a real broker."""

from __future__ import annotations

import json

from tests.integration.cli import hostbroker, lines, one_line_error


def test_perf_produce_then_consume(broker):
    with broker.client() as client:
        client.create_topic("bench", 2)
    produced = hostbroker("perf", "produce", "--bootstrap", broker.unix, "--topic", "bench",
                          "--messages", "3001", "--size", "50", "--batch-size", "100",
                          "--processes", "2", "--json", timeout=120)
    assert produced.returncode == 0, produced.stderr
    report = json.loads(produced.stdout)
    assert report["messages"] == 3001 and report["payload_bytes"] == 3001 * 50
    assert report["failed"] == 0 and report["processes"] == 2
    assert 2 <= report["requests"] <= 3001  # at least one per process
    latency = report["latency_ms"]
    assert 0 < latency["p50"] <= latency["p99"] <= latency["p99.9"] <= latency["max"]
    assert report["records_per_s"] > 0 and report["mb_per_s"] > 0
    with broker.client() as client:
        (topic,) = client.metadata(["bench"]).topics
    assert sum(p.log_end_offset for p in topic.partitions) == 3001 * (4 + 6 + 50)

    consumed = hostbroker("perf", "consume", "--bootstrap", broker.tcp, "--topic", "bench",
                          "--messages", "3000", "--processes", "2", "--fetch-size", "4096",
                          "--json", timeout=120)
    assert consumed.returncode == 0, consumed.stderr
    report = json.loads(consumed.stdout)
    assert report["messages"] == 3000 and report["payload_bytes"] == 3000 * 50
    assert report["requests"] > 0

    text = hostbroker("perf", "produce", "--bootstrap", broker.tcp, "--topic", "bench",
                      "--messages", "200", "--size", "10", "--acks", "0", "--compression",
                      "snappy")
    assert text.returncode == 0, text.stderr
    out = lines(text)
    assert out[0].startswith("messages: 200  payload: 2,000 bytes  elapsed: ")
    assert "(MB = 10^6 bytes of payload)" in out[1]
    assert out[2] == "request latency: none measured (acks=0: the broker does not answer)"


def test_perf_consume_of_too_few_and_refusals(broker):
    with broker.client() as client:
        client.create_topic("small", 1)
    assert hostbroker("perf", "produce", "--bootstrap", broker.tcp, "--topic", "small",
                      "--messages", "10", "--size", "5").returncode == 0
    short = hostbroker("perf", "consume", "--bootstrap", broker.tcp, "--topic", "small",
                       "--messages", "20", "--timeout-ms", "300")
    assert short.returncode == 1
    assert lines(short)[0].startswith("messages: 10  payload: 50 bytes")
    assert one_line_error(short) == ("hostbroker perf consume: only 10 of 20 messages: "
                                      "nothing new for 300 ms")
    for args, needle in [
        (("produce", "--messages", "10", "--size", "5", "--processes", "65"), "--processes"),
        (("produce", "--messages", "0", "--size", "5"), "--messages"),
        (("produce", "--messages", "10", "--size", str(10**9)), "--size"),
        (("produce", "--messages", "2", "--size", "5", "--processes", "3"), "must not exceed"),
        (("consume", "--messages", "10", "--processes", "2"), "1 partitions"),
        (("produce", "--messages", "1", "--size", "1", "--property", "batch.size=x"),
         "batch.size"),
    ]:
        result = hostbroker("perf", args[0], "--bootstrap", broker.tcp, "--topic", "small",
                            *args[1:])
        assert result.returncode == 2, (args, result)
        assert needle in one_line_error(result)
