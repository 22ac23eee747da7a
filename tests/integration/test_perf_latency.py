"""``hostbroker perf latency`` as a subprocess against a real broker: its report and refusals.

The tests share one module broker (``served``), each with its own topic; only the
commits/heartbeats test uses the tool's fixed group ``hostbroker-perf``. Its refusal by a
broker with a short ``group.max.session.timeout.ms`` needs a broker of its own."""

from __future__ import annotations

import json

from hostbroker.log.message import iter_messages
from tests.integration.broker import free_port
from tests.integration.cli import hostbroker, lines, one_line_error
from tests.integration.coordinator_wire import GroupWire
from tests.integration.wire_helpers import module_broker, new_topic

ENTRY_BYTES = 4 + 6 + 100  # length, v1 header, the 100-byte message

served = module_broker()


def test_perf_latency_reports_every_api_and_load(served):
    broker, lat = served, new_topic("lat")
    result = hostbroker("perf", "latency", "--bootstrap", broker.tcp, "--topic", lat,
                        "--seconds", "0.3", "--clients", "2", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["test"], report["topic"], report["clients"]) == ("latency", lat, 2)
    assert list(report["results"]) == ["metadata", "produce", "fetch", "offsets"]
    for api_name, loads in report["results"].items():
        assert list(loads) == ["idle", "moderate", "full"], api_name
        for load, r in loads.items():
            latency = r["latency_ms"]
            assert r["requests"] > 0 and r["errors"] == 0, (api_name, load, r)
            assert 0 < latency["p50"] <= latency["p99"] <= latency["p99.9"] <= latency["max"]
        assert loads["full"]["requests_per_s"] > 0
        moderate = loads["moderate"]
        assert abs(moderate["offered_per_s"] - max(moderate["capacity_per_s"] / 2, 1.0)) <= 0.1

    # Every PRODUCE appended its message: ten put there first, then one per request.
    produced = sum(r["requests"] for r in report["results"]["produce"].values())
    with broker.client() as client:
        (topic,) = client.metadata([lat]).topics
        (partition,) = topic.partitions
        start, end = partition.log_start_offset, partition.log_end_offset
        assert end - start == (10 + produced) * ENTRY_BYTES
        data = client.fetch(lat, 0, start, end - start + 1024).message_set
    payloads = [m.payload for m in iter_messages(data, start)]
    assert payloads == [b"m" * 100] * (10 + produced)


def test_perf_latency_of_commits_fetches_and_heartbeats(served, make_broker, tmp_path):
    broker, lat3 = served, new_topic("lat3")
    result = hostbroker("perf", "latency", "--bootstrap", broker.unix, "--topic", lat3,
                        "--api", "offset_commit,offset_fetch,heartbeat", "--seconds", "0.3",
                        "--clients", "2", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert list(report["results"]) == ["offset_commit", "offset_fetch", "heartbeat"]
    for api_name, loads in report["results"].items():
        assert list(loads) == ["idle", "moderate", "full"], api_name
        for load, r in loads.items():
            assert r["requests"] > 0 and r["errors"] == 0, (api_name, load, r)
    with broker.client() as client:
        start = client.offsets(lat3, 0, -2, 1)[0]
    with GroupWire(broker.tcp) as wire:
        # the commits stored partition 0's log start; the member joined for the
        # heartbeats has left
        assert wire.fetch_offsets("hostbroker-perf", [(lat3, 0)]) == [start]
        described = wire.describe("hostbroker-perf")
    assert (described.phase, described.members) == ("EMPTY", ())

    # "all" is every API; a join the broker refuses is one line, status 1
    (tmp_path / "strict").mkdir()
    strict = make_broker(root=tmp_path / "strict", **{"group.max.session.timeout.ms": "5000"})
    result = hostbroker("perf", "latency", "--bootstrap", strict.tcp, "--topic", lat3,
                        "--api", "all", "--load", "idle", "--seconds", "0.1", "--json",
                        timeout=60)
    assert result.returncode == 1
    assert one_line_error(result) == (
        "hostbroker perf latency: broker error: INVALID_SESSION_TIMEOUT: joining group "
        "hostbroker-perf to "
        "time HEARTBEAT (session timeout 10000 ms)")


def test_perf_latency_text_for_chosen_apis_and_loads(served):
    broker, lat2 = served, new_topic("lat2")
    result = hostbroker("perf", "latency", "--bootstrap", broker.unix, "--topic", lat2,
                        "--api", "offsets,metadata", "--load", "idle", "--seconds", "0.2",
                        timeout=60)
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[0] == (f"request latency (ms) on {broker.unix}, topic {lat2}, 0.2 s per load, "
                      "4 clients at full load")
    assert out[1].split() == ["api", "load", "requests", "req/s", "p50", "p99", "p99.9", "max",
                              "errors"]
    assert [line.split()[:2] for line in out[2:]] == [["offsets", "idle"], ["metadata", "idle"]]
    assert all(line.split()[-1] == "0" for line in out[2:])


def test_perf_latency_refusals(served):
    broker, lat = served, new_topic("lat")
    unreachable = f"tcp://127.0.0.1:{free_port()}"
    result = hostbroker("perf", "latency", "--bootstrap", unreachable, "--topic", lat)
    assert result.returncode == 1
    assert one_line_error(result) == (f"hostbroker perf latency: cannot reach the broker at "
                                      f"{unreachable}: Connection refused")
    for args, line in [
        (("--api", "metadata,nope"), "--api 'metadata,nope': expected a comma-separated list "
                                     "of metadata, produce, fetch, offsets, offset_commit, "
                                     "offset_fetch, heartbeat (or all)"),
        (("--load", "all,idle"), "--load 'all,idle': expected a comma-separated list of idle, "
                                 "moderate, full (or all)"),
        (("--seconds", "0"), "--seconds must be between 0.1 and 3600, not 0"),
        (("--clients", "65"), "--clients must be between 1 and 64, not 65"),
    ]:
        result = hostbroker("perf", "latency", "--bootstrap", broker.tcp, "--topic", lat,
                            *args)
        assert result.returncode == 2, (args, result)
        assert one_line_error(result) == f"hostbroker perf latency: {line}"
    bad_uri = hostbroker("perf", "latency", "--bootstrap", "http://x", "--topic", lat)
    assert bad_uri.returncode == 2
    assert one_line_error(bad_uri).startswith("hostbroker perf latency: --bootstrap: bad broker URI")
    bad_topic = hostbroker("perf", "latency", "--bootstrap", broker.tcp, "--topic", "a/b")
    assert bad_topic.returncode == 2
    assert one_line_error(bad_topic).startswith("hostbroker perf latency: ")
    # Nothing was measured by a refused command: the topic was never written.
    with broker.client() as client:
        (topic,) = client.metadata([lat]).topics
    assert topic.partitions == ()
