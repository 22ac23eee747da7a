"""The CPU wake-up latency request, for real: ``hostbroker serve`` with
``cpu.wakeup.latency.us`` holds ``/dev/cpu_dma_latency`` open for as long as
it runs and the kernel's target follows; ``hostbroker cpu-latency --hold``
does the same from a unit of its own; neither can take it unprivileged, and
says so in one line.

The request is machine-wide (the kernel keeps the lowest one held), so these
tests run alone (tools/run.sh RUN_ALONE) and compare with the target found
before each test. They need root, as the device does: CI runs as root.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from hostbroker import cpulatency
from hostbroker.errors import ExitStatus
from tests.integration.broker import serve_unprivileged


def _need_root() -> None:
    assert os.geteuid() == 0 and os.path.exists(cpulatency.DEVICE), (
        f"these tests hold {cpulatency.DEVICE}, which only root can open; CI runs as root")


def _holders() -> set[int]:
    """PIDs with the device open (the kernel keeps a request per open file)."""
    pids = set()
    for pid in psutil.pids():
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == cpulatency.DEVICE:
                    pids.add(pid)
                    break
        except OSError:
            pass  # gone, or not ours to read
    return pids


def _wait(predicate, timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def test_the_broker_holds_the_request_while_it_runs(make_broker):
    _need_root()
    before = cpulatency.current()
    assert not _holders() & {os.getpid()}
    broker = make_broker(**{"cpu.wakeup.latency.us": 7})
    pid = broker.proc.pid
    assert pid in _holders()
    assert cpulatency.current() == min(before, 7)
    _wait(lambda: "CPU wake-up latency held at 7 µs" in broker.log(),
          what="the serving line naming the request")  # printed as the last worker is up
    # a machine whose idle CPUs ignore the request is told so, in one line, at start
    why = cpulatency.no_effect()
    assert (f"hostbroker: cpu.wakeup.latency.us: {why}\n" in broker.log()) == (why is not None)
    assert "has no effect here" not in broker.log() or why is not None
    # it serves as ever, and top shows the target in force
    with broker.client() as c:
        c.create_topic("t", 1)
        assert c.metadata().topics
    top = subprocess.run([sys.executable, "-m", "hostbroker", "top", "--json", "--interval",
                          "0.1", "--iterations", "1", "--set",
                          f"log.dirs={broker.settings['log.dirs']}"],
                         capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(top.stdout)["cpu_wakeup_latency_us"] == min(before, 7)
    assert broker.stop() == 0
    assert pid not in _holders()
    _wait(lambda: cpulatency.current() == before, what="the request withdrawn")


def test_the_broker_leaves_the_machine_alone_by_default(make_broker):
    _need_root()
    before = cpulatency.current()
    broker = make_broker()
    holders = _holders()
    assert broker.proc.pid not in holders
    assert not holders & set(broker.workers().values())
    assert cpulatency.current() == before
    _wait(lambda: "hostbroker: serving" in broker.log(), what="the serving line")
    assert "CPU wake-up latency" not in broker.log()


def test_the_request_goes_with_a_killed_broker(make_broker):
    """SIGKILL to every process of the broker: the kernel withdraws the request
    with the last open file; nothing is left behind for the next start."""
    _need_root()
    before = cpulatency.current()
    broker = make_broker(**{"cpu.wakeup.latency.us": 0})
    assert cpulatency.current() == 0
    broker.kill_tree()
    _wait(lambda: cpulatency.current() == before, what="the request withdrawn after SIGKILL")


def test_unprivileged_the_broker_refuses_to_start_in_one_line(tmp_path):
    """The real start path (``hostbroker.cli.main``), its effective user dropped
    to nobody after the imports: the request is the first thing it takes."""
    _need_root()
    result = serve_unprivileged(tmp_path, {"cpu.wakeup.latency.us": 0})
    lines = result.stderr.splitlines()
    assert result.returncode == ExitStatus.REFUSED, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("hostbroker: cpu.wakeup.latency.us: cannot open "
                               "/dev/cpu_dma_latency: permission denied"), lines[0]
    assert not (tmp_path / "logs").exists()  # nothing created


def test_a_value_out_of_range_is_a_configuration_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "hostbroker", "serve",
                             "--set", "cpu.wakeup.latency.us=-2",
                             "--set", f"log.dirs={tmp_path}/logs"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == ExitStatus.USAGE, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert "cpu.wakeup.latency.us" in result.stderr
    assert not (tmp_path / "logs").exists()


def test_the_command_holds_until_told_to_stop_and_tells_systemd(tmp_path):
    _need_root()
    before = cpulatency.current()
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(30)
    proc = subprocess.Popen([sys.executable, "-m", "hostbroker", "cpu-latency", "--hold", "3"],
                            env={**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify.sock")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = notify.recv(4096).decode()
        assert "READY=1" in ready and "STATUS=holding 3 µs" in ready
        assert proc.pid in _holders()
        assert cpulatency.current() == min(before, 3)
        shown = subprocess.run([sys.executable, "-m", "hostbroker", "cpu-latency"],
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and shown.stdout == f"{min(before, 3)}\n", shown
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        notify.close()
    assert proc.returncode == 0, err
    assert "holding 3 µs (/dev/cpu_dma_latency)" in err
    why = cpulatency.no_effect()
    assert (f"hostbroker cpu-latency: {why}\n" in err) == (why is not None)
    _wait(lambda: cpulatency.current() == before, what="the request withdrawn")


@pytest.mark.parametrize("value, words", [
    ("-1", "must be 0 to 2000000000, got '-1'"),
    ("2000000001", "must be 0 to 2000000000"),
    ("1.5", "expected whole microseconds, got '1.5'"),
])
def test_the_command_refuses_a_bad_value_in_one_line(value, words):
    result = subprocess.run([sys.executable, "-m", "hostbroker", "cpu-latency", "--hold", value],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == ExitStatus.USAGE
    assert len(result.stderr.splitlines()) == 1 and words in result.stderr, result.stderr
