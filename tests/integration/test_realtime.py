"""The real-time scheduling policy, for real: ``hostbroker serve`` with
``cpu.realtime.priority`` runs every process and thread of the broker under
SCHED_RR, a replaced worker included; it refuses to spin under a real-time
policy however it got one; unprivileged it refuses to start in one line.

Setting a real-time policy needs root (or CAP_SYS_NICE): CI runs as root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from hostbroker.errors import ExitStatus
from hostbroker.log.message import encode_message_set
from tests.integration.broker import serve_args, serve_unprivileged
from tests.integration.wire_helpers import wait_for


def _need_root() -> None:
    assert os.geteuid() == 0, "these tests set a real-time policy, which needs root; CI runs as root"


def _policies(pid: int) -> set[tuple[int, int]]:
    """(policy, priority) of every thread of ``pid``."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.add((os.sched_getscheduler(int(tid)), os.sched_getparam(int(tid)).sched_priority))
        except ProcessLookupError:
            pass  # a thread that ended meanwhile
    return out


def test_every_process_and_thread_of_the_broker_runs_round_robin(make_broker):
    _need_root()
    broker = make_broker(**{"cpu.realtime.priority": 3})
    workers = broker.workers()
    assert {"hb-writer-0", "hb-handler-1", "hb-proc-1", "hb-acceptor"} <= set(workers)
    for pid in [broker.proc.pid, *workers.values()]:
        assert _policies(pid) == {(os.SCHED_RR, 3)}, pid
    assert wait_for(lambda: "real-time SCHED_RR priority 3" in broker.log()), broker.log()
    top = subprocess.run([sys.executable, "-m", "hostbroker", "top", "--json", "--interval",
                          "0.1", "--iterations", "1", "--set",
                          f"log.dirs={broker.settings['log.dirs']}"],
                         capture_output=True, text=True, timeout=30, check=True)
    reading = json.loads(top.stdout.splitlines()[-1])
    assert reading["scheduling"] == "SCHED_RR 3"
    assert {w["scheduling"] for w in reading["workers"]} == {"SCHED_RR 3"}
    with broker.client() as c:
        c.create_topic("t", 1)
        c.produce("t", 0, encode_message_set([b"m"]))
        assert c.fetch("t", 0, 0, 1024).error_code == 0
    # a worker the supervisor forks again later has it too
    old = workers["hb-proc-0"]
    os.kill(old, signal.SIGKILL)
    new = broker.wait_worker_replaced("hb-proc-0", old)
    assert _policies(new) == {(os.SCHED_RR, 3)}
    assert broker.stop() == 0


def test_by_default_the_scheduling_is_left_as_started(make_broker):
    broker = make_broker()
    for pid in [broker.proc.pid, *broker.workers().values()]:
        assert {policy for policy, _ in _policies(pid)} == {os.SCHED_OTHER}, pid
    assert wait_for(lambda: "hostbroker: serving" in broker.log()), broker.log()
    assert "real-time" not in broker.log()


def _serve(tmp_path, settings: dict, preexec=None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "hostbroker", *serve_args(tmp_path, settings)]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, preexec_fn=preexec, check=False)


def test_spinning_under_the_setting_is_a_configuration_error(tmp_path):
    result = _serve(tmp_path, {"cpu.realtime.priority": 1, "worker.spin.us": 20})
    assert result.returncode == ExitStatus.USAGE, result.stderr
    assert result.stderr.splitlines() == [(
        "hostbroker: worker.spin.us: must be 0 under a real-time scheduling policy (this "
        "broker runs under SCHED_RR): a spinning real-time worker keeps every ordinary "
        "process off its CPU")], result.stderr
    assert not (tmp_path / "logs").exists()  # nothing created


def test_spinning_under_a_policy_given_from_outside_is_refused_too(tmp_path):
    """Started under SCHED_RR (as `chrt -r 2` or a unit's CPUSchedulingPolicy=rr
    would), with the setting left at 0: the same refusal."""
    _need_root()
    result = _serve(tmp_path, {"processor.put.spin.us": 5},
                    preexec=lambda: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(2)))
    assert result.returncode == ExitStatus.USAGE, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("hostbroker: processor.put.spin.us: must be 0 under a "
                                    "real-time scheduling policy"), result.stderr


def test_unprivileged_the_broker_refuses_to_start_in_one_line(tmp_path):
    """The real start path (``hostbroker.cli.main``), with no real-time priority
    limit and its effective user dropped to nobody after the imports: the
    policy is the first thing it takes."""
    _need_root()
    result = serve_unprivileged(tmp_path, {"cpu.realtime.priority": 1},
                                setup="resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))")
    lines = result.stderr.splitlines()
    assert result.returncode == ExitStatus.REFUSED, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("hostbroker: cpu.realtime.priority: SCHED_RR at priority 1: "
                               "permission denied"), lines[0]
    assert not (tmp_path / "logs").exists()
    # a configuration that cannot run anywhere is said first, as a configuration error
    result = serve_unprivileged(tmp_path, {"cpu.realtime.priority": 1, "worker.spin.us": 5},
                                setup="resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))")
    assert result.returncode == ExitStatus.USAGE, result.stderr
    assert result.stderr.startswith("hostbroker: worker.spin.us: must be 0"), result.stderr


def test_a_priority_out_of_range_is_a_configuration_error(tmp_path):
    result = _serve(tmp_path, {"cpu.realtime.priority": 100})
    assert result.returncode == ExitStatus.USAGE, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "cpu.realtime.priority" in result.stderr and "100" in result.stderr
