import json
import subprocess
import sys
import time

from hostbroker.log.message import encode_message_set
from hostbroker.top import render


def test_top_json_shows_every_worker_with_counters(broker):
    with broker.client() as c:
        for _ in range(5):  # acks=-1: through the handler (a lone acks=1 one goes past it)
            c.produce("watched", 0, encode_message_set([b"m" * 100] * 10), acks=-1)
    args = [sys.executable, "-m", "hostbroker", "top", "--json", "--interval", "0.2",
            "--iterations", "1", "--set", f"log.dirs={broker.settings['log.dirs']}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout
    reading = json.loads(out.splitlines()[-1])
    assert reading["broker_state"] == "running"
    assert reading["supervisor_pid"] == broker.proc.pid
    by_name = {w["name"]: w for w in reading["workers"]}
    assert {n: w["pid"] for n, w in by_name.items()} == broker.workers()
    assert by_name["hb-writer-0"]["counters"]["messages_in"] == 50
    assert sum(w["counters"]["requests"] for n, w in by_name.items()
               if n.startswith("hb-handler")) >= 5
    assert all(w["state"] == "ready" and w["rss_bytes"] > 0 for w in reading["workers"])
    assert reading["offline_log_dirs"] == [] and reading["offline_partitions"] == []
    # ordinary scheduling, as started (test_realtime.py has the real-time case)
    assert reading["scheduling"] == "SCHED_OTHER"
    assert {w["scheduling"] for w in reading["workers"]} == {"SCHED_OTHER"}


def test_top_table_and_missing_broker(broker, tmp_path):
    args = [sys.executable, "-m", "hostbroker", "top", "--interval", "0.1", "--iterations", "1",
            "--set", f"log.dirs={broker.settings['log.dirs']}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout
    assert "hostbroker running" in out and "hb-handler-1" in out and "hb-acceptor" in out
    missing = subprocess.run(args[:-2] + ["--set", f"log.dirs={tmp_path}/nothing"],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode != 0
    assert "no broker running" in missing.stderr


def test_top_table_names_what_is_offline():
    reading = {"broker_state": "running", "supervisor_pid": 1, "workers": [],
               "offline_log_dirs": ["/disk1"],
               "offline_partitions": [{"topic": "t", "partition": 3, "log_dir": "/disk1"}]}
    lines = render(reading, None, 1.0).splitlines()
    assert lines[-2:] == ["OFFLINE log dir /disk1", "OFFLINE partition t-3 in /disk1"]


def test_top_table_shows_wake_ups_and_ring_wait_per_request():
    def reading(requests, wait_ns, wakeups):
        counters = {"requests": requests, "wait_ns": wait_ns, "wakeups": wakeups}
        return {"broker_state": "running", "supervisor_pid": 1,
                "workers": [{"kind": "handler", "index": 0, "name": "hb-handler-0", "pid": 7,
                             "cpu_percent": 1.0, "rss_bytes": 2**20, "counters": counters}]}
    lines = render(reading(30, 3_000_000, 25), reading(10, 1_000_000, 5), 2.0).splitlines()
    assert lines[1].split()[-2:] == ["wake/s", "wait/req"]
    cells = lines[2].split()
    assert cells[-2:] == ["10", "100us"]  # (25 - 5) / 2 s; 2 ms waited over 20 requests
    assert render(reading(30, 3_000_000, 25), None, 2.0).splitlines()[2].split()[-1] == "0"


def test_top_json_says_where_the_time_goes(broker):
    with broker.client() as c:
        for _ in range(20):  # acks=-1 PRODUCE goes to the handler (METADATA the processor
            # answers, a lone acks=1 PRODUCE its writer)
            c.produce("timed", 0, encode_message_set([b"t" * 100] * 10), acks=-1)
    args = [sys.executable, "-m", "hostbroker", "top", "--json", "--interval", "0.5",
            "--iterations", "1", "--set", f"log.dirs={broker.settings['log.dirs']}"]

    def workers():
        out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout
        return json.loads(out.splitlines()[-1])["workers"]

    deadline = time.monotonic() + 10
    while True:  # the heartbeat thread publishes the timing counters every ~0.4 s
        rows = [w for w in workers() if w["kind"] in ("handler", "processor")
                and w["counters"]["requests"]]
        if all(w["counters"]["work_ns"] for w in rows) or time.monotonic() > deadline:
            break
    busiest = {}  # the processor and the handler of our connection
    for w in rows:
        if w["counters"]["requests"] > busiest.get(w["kind"], {"counters": {"requests": 0}})[
                "counters"]["requests"]:
            busiest[w["kind"]] = w
    assert set(busiest) == {"handler", "processor"}
    for w in busiest.values():
        c = w["counters"]
        assert c["requests"] >= 20 and c["wait_ns"] > 0 and c["work_ns"] > 0, w
        assert c["wakeups"] > 0 and c["spin_hits"] == 0, w  # worker.spin.us is 0 by default
        # every batch of requests or answers was passed on with a wake-up decision
        assert c["bells_rung"] + c["bells_skipped"] >= c["requests"], w


def test_top_heads_its_table_with_the_cpu_wake_up_latency_target():
    def first_line(target):
        return render({"broker_state": "running", "supervisor_pid": 1, "workers": [],
                       "cpu_wakeup_latency_us": target}, None, 1.0).splitlines()[0]
    assert first_line(0) == "hostbroker running  supervisor pid 1  CPU wake-up latency 0 µs"
    assert first_line(2_000_000_000).endswith("  CPU wake-up latency not bounded")
    assert first_line(None) == "hostbroker running  supervisor pid 1"  # not root: not readable


def test_top_heads_its_table_with_a_real_time_policy_only():
    def first_line(policy):
        return render({"broker_state": "running", "supervisor_pid": 1, "workers": [],
                       "cpu_wakeup_latency_us": None, "scheduling": policy},
                      None, 1.0).splitlines()[0]
    assert first_line("SCHED_RR 3") == "hostbroker running  supervisor pid 1  SCHED_RR 3"
    assert first_line("SCHED_OTHER") == "hostbroker running  supervisor pid 1"
    assert first_line(None) == "hostbroker running  supervisor pid 1"
