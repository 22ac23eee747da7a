"""``hostbroker top``'s screen: 100 columns, human units, rates on the first
screen, the per-API and per-partition stats, refreshing in place."""

from __future__ import annotations

import json
import subprocess
import sys

from hostbroker.log.message import encode_message_set
from hostbroker.shm.stats import LATENCY_BOUNDS
from hostbroker.top import screen
from hostbroker.top_render import WIDTH, cut, cut_path, human, human_bytes, render


def _worker(name: str, counters: dict, kind="processor", index=0) -> dict:
    return {"kind": kind, "index": index, "name": name, "pid": 4_194_304,
            "cpu_percent": 100.0, "rss_bytes": 3 * 2**30, "counters": counters}


def _reading(workers, api=None, partitions=None) -> dict:
    reading = {"broker_state": "running", "supervisor_pid": 4_194_304, "workers": workers,
               "cpu_wakeup_latency_us": 2_000_000_000, "scheduling": "SCHED_RR priority 99"}
    if api is not None:
        reading["api"] = api
    if partitions is not None:
        reading["partitions"] = partitions
    return reading


def _api(requests, errors, sum_ns, buckets) -> dict:
    return {"requests": requests, "errors": errors, "latency_sum_ns": sum_ns,
            "buckets": buckets}


def test_human_units():
    assert [human(x) for x in (0, 7, 950, 1234, 56_789, 1.2e6, 3e9)] == [
        "0", "7.0", "950", "1.2k", "57k", "1.2M", "3.0G"]
    assert [human_bytes(x) for x in (0, 512, 1536, 34 * 2**20, 2**30)] == [
        "0B", "512B", "1.5KiB", "34MiB", "1.0GiB"]
    assert cut("a-very-long-topic-name", 8) == "a-very-~" and cut("short", 8) == "short"
    assert cut_path("/srv/disks/disk-07/hostbroker/logs", 20) == "/srv/d~stbroker/logs"
    assert len(cut_path("/d" * 100, 40)) == 40 and cut_path("/short", 40) == "/short"


def test_every_line_fits_100_columns_at_the_largest_figures():
    huge = dict.fromkeys(("requests", "bytes_in", "bytes_out", "messages_in", "errors",
                          "wakeups", "wait_ns"), 10**18)
    huge.update(connections=10**6, fetch_parked=10**6)
    before = [_worker("hb-processor-with-a-long-name-12", {k: 0 for k in huge})]
    now = [_worker("hb-processor-with-a-long-name-12", huge)]
    buckets = [10**12] * len(LATENCY_BOUNDS)
    api_before = {"offset_for_leader_epoch": _api(0, 0, 0, [0] * 12)}
    api_now = {"offset_for_leader_epoch": _api(10**12, 10**12, 10**21, buckets)}
    name = "t" * 249
    parts_before = [{"topic": name, "partition": 9999, "messages_in": 0, "bytes_in": 0,
                     "bytes_out": 0, "fetches": 0}]
    parts_now = [{"topic": name, "partition": 9999, "messages_in": 10**18, "bytes_in": 10**18,
                  "bytes_out": 10**18, "fetches": 10**18}]
    reading = _reading(now, api_now, parts_now)
    reading.update(offline_partitions=[{"topic": name, "partition": 1, "log_dir": "/d" * 80}],
                   log_dirs=[{"id": 2**31 - 1, "path": "/d" * 80, "state": "reopening",
                              "replicas": 65536, "leaders": 65536, "under_replicated": 65536,
                              "offline_replicas": 0}] * 2)
    text = render(reading, _reading(before, api_before, parts_before), 0.001)
    lines = text.splitlines()
    assert len(lines) >= 7
    assert max(map(len, lines)) <= WIDTH, "\n".join(line for line in lines if len(line) > WIDTH)


def test_rates_in_human_units_and_the_stats_sections():
    before = _reading([_worker("hb-proc-0", {"requests": 0, "bytes_in": 0, "bytes_out": 0,
                                             "messages_in": 0, "errors": 0, "wakeups": 0})],
                      {"produce": _api(10, 0, 10_000_000, [10] * 12),
                       "fetch": _api(5, 0, 0, [5] * 12)},
                      [{"topic": "big", "partition": 0, "messages_in": 0, "bytes_in": 0,
                        "bytes_out": 0, "fetches": 0},
                       {"topic": "small", "partition": 3, "messages_in": 0, "bytes_in": 0,
                        "bytes_out": 0, "fetches": 0}])
    # in 2 s: 3,000 produce requests, 20 errors; 99 % under 1 ms, the rest under 50 ms
    produce_buckets = [10 + 1000, 10 + 2970] + [10 + 2970] * 4 + [10 + 3000] * 6
    now = _reading([_worker("hb-proc-0", {"requests": 3000, "bytes_in": 6 * 2**20,
                                          "bytes_out": 2048, "messages_in": 30_000,
                                          "errors": 20, "wakeups": 10})],
                   {"produce": _api(3010, 20, 10_000_000 + 3000 * 400_000, produce_buckets),
                    "fetch": _api(5, 0, 0, [5] * 12)},
                   [{"topic": "big", "partition": 0, "messages_in": 30_000,
                     "bytes_in": 6 * 2**20, "bytes_out": 0, "fetches": 0},
                    {"topic": "small", "partition": 3, "messages_in": 10, "bytes_in": 100,
                     "bytes_out": 0, "fetches": 0}])
    lines = render(now, before, 2.0).splitlines()
    proc = next(line for line in lines if line.startswith("hb-proc-0")).split()
    # pid, cpu, rss, req/s, in/s, out/s, msg/s, err/s, conns, parked, wake/s, wait/req
    assert proc[1:] == ["4194304", "100", "3.0G", "1.5k", "3.0MiB", "1.0KiB", "15k", "10",
                        "0", "0", "5.0", "0us"]
    api_at = next(i for i, line in enumerate(lines) if line.startswith("api "))
    assert lines[api_at].split() == ["api", "req/s", "err/s", "mean", "p99", "requests",
                                     "errors"]
    produce = lines[api_at + 1].split()
    assert produce[:4] == ["produce", "1.5k", "10", "0.4ms"]
    assert produce[4] == "1.0ms"  # 2,970 of 3,000 under 1 ms: the 99th is at its bound
    assert produce[5:] == ["3.0k", "20"]
    assert not any(line.startswith("fetch ") for line in lines)  # nothing new since
    part_at = next(i for i, line in enumerate(lines) if line.startswith("partition"))
    assert lines[part_at + 1].split() == ["big-0", "15k", "3.0MiB", "0B", "0"]
    assert lines[part_at + 2].split() == ["small-3", "5.0", "50B", "0B", "0"]


def test_a_terminal_is_redrawn_in_place():
    drawn = screen("one\ntwo", tty=True)
    assert drawn == "\x1b[Hone\x1b[K\ntwo\x1b[K\n\x1b[J"  # home, each line cleared to its end
    assert screen("one\ntwo", tty=False) == "one\ntwo\n"


def _top(broker, *extra) -> str:
    args = [sys.executable, "-m", "hostbroker", "top", *extra,
            "--set", f"log.dirs={broker.settings['log.dirs']}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout


def test_the_first_screen_of_a_busy_broker_has_rates(broker):
    with broker.client() as c:
        c.create_topic("busy", 2)
        for _ in range(20):
            c.produce("busy", 1, encode_message_set([b"m" * 200] * 10), acks=-1)
    # a producer that keeps on while top looks, on the broker's own clock
    producer = subprocess.Popen(
        [sys.executable, "-c",
         "import time\nfrom hostbroker.client.simple import SimpleClient\n"
         "from hostbroker.log.message import encode_message_set\n"
         f"c = SimpleClient({broker.unix!r})\nend = time.monotonic() + 4\n"
         "while time.monotonic() < end:\n"
         "    c.produce('busy', 0, encode_message_set([b'x' * 1000] * 10), acks=-1)\n"
         "    time.sleep(0.005)\n"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = _top(broker, "--once", "--interval", "1")
        reading = json.loads(_top(broker, "--json", "--iterations", "1",
                                  "--interval", "0.2").splitlines()[-1])
    finally:
        producer.wait(30)
    lines = out.splitlines()
    assert "\x1b" not in out  # --once: plain lines
    assert max(map(len, lines)) <= WIDTH
    writer = next(line for line in lines if line.startswith("hb-writer-0")).split()
    assert writer[5] != "0B" and writer[7] != "0"  # in/s and msg/s of the first screen
    api = {line.split()[0]: line.split() for line in lines}
    assert "produce" in api and api["produce"][1] != "0"
    part_at = next(i for i, line in enumerate(lines) if line.startswith("partition"))
    assert lines[part_at + 1].split()[0] == "busy-0"  # the one taking bytes now
    assert reading["api"]["produce"]["requests"] >= 20
    by_partition = {(p["topic"], p["partition"]): p for p in reading["partitions"]}
    assert by_partition[("busy", 1)]["messages_in"] == 200
    assert by_partition[("busy", 1)]["bytes_in"] == 20 * len(
        encode_message_set([b"m" * 200] * 10))


def test_ten_thousand_partitions_show_the_busiest_and_the_rest_summed():
    """At 10,000 partitions the screen keeps its size: the ``TOP_PARTITIONS``
    taking the most bytes in first, then one line summing the others that
    moved; the ones that did not move are not counted."""
    from hostbroker.top_render import TOP_PARTITIONS

    def parts(moving: dict) -> list:
        return [{"topic": f"t{t:03d}", "partition": p, "messages_in": moving.get((t, p), 0),
                 "bytes_in": 100 * moving.get((t, p), 0), "bytes_out": 0, "fetches": 0}
                for t in range(100) for p in range(100)]

    before = parts({})
    moving = {(t, 7): 10 * (t + 1) for t in range(0, 100, 4)}  # 25 of them, t096 the most
    lines = render(_reading([], None, parts(moving)), _reading([], None, before), 2.0).split("\n")
    part_at = next(i for i, line in enumerate(lines) if line.startswith("partition"))
    shown = [line.split()[0] for line in lines[part_at + 1:part_at + 1 + TOP_PARTITIONS]]
    assert shown == [f"t{t:03d}-7" for t in range(96, 59, -4)]
    rest = lines[part_at + 1 + TOP_PARTITIONS].split()
    # the 15 others: 10 * (1 + 5 + ... + 57) = 4,350 messages in 2 s
    assert rest == ["15", "more", "partitions", "2.2k", "212KiB", "0B", "0"]
    assert len(lines) == part_at + 2 + TOP_PARTITIONS
    assert max(map(len, lines)) <= WIDTH


def test_thousands_offline_or_under_replicated_are_counted_past_the_first():
    from hostbroker.top_render import LISTED

    reading = _reading([])
    reading.update(
        under_replicated_partitions=[["r", p] for p in range(LISTED)],
        offline_log_dirs=["/d1"],
        offline_partitions=[{"topic": "t", "partition": p, "log_dir": "/d1"}
                            for p in range(5000)])
    lines = render(reading, None, 1.0).split("\n")
    assert [line for line in lines if line.startswith("UNDER-REPLICATED")] == [
        f"UNDER-REPLICATED partition r-{p}" for p in range(LISTED)]  # all of them: no count
    offline = [line for line in lines if line.startswith("OFFLINE")]
    assert offline == (["OFFLINE log dir /d1"]
                       + [f"OFFLINE partition t-{p} in /d1" for p in range(LISTED)]
                       + [f"OFFLINE {5000 - LISTED:,} more partitions (top --json lists them all)"])
