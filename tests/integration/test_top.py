import json
import subprocess
import sys

from hostbroker.log.message import encode_message_set
from hostbroker.top import render


def test_top_json_shows_every_worker_with_counters(broker):
    with broker.client() as c:
        for _ in range(5):
            c.produce("watched", 0, encode_message_set([b"m" * 100] * 10))
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
