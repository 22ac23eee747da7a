"""hostbroker.cpusched without privileges: how a policy is read and named,
what the kernel's real-time throttle setting says, and the priority range.
Taking SCHED_RR for real is tests/integration/test_realtime.py's."""

from __future__ import annotations

import os

import pytest

from hostbroker import cpusched


def test_an_ordinary_process_is_named_and_not_real_time():
    assert cpusched.describe(os.getpid()) == "SCHED_OTHER"
    assert cpusched.realtime_policy() is None


def test_a_process_that_is_gone_has_no_policy():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert cpusched.describe(pid) is None


@pytest.mark.parametrize("text, throttled", [
    ("950000\n", True), ("0\n", True), ("-1\n", False), ("garbage", True)])
def test_the_throttle_is_read_from_the_kernel_setting(tmp_path, text, throttled):
    path = tmp_path / "sched_rt_runtime_us"
    path.write_text(text)
    assert cpusched.throttled(str(path)) is throttled


def test_an_unreadable_throttle_counts_as_on(tmp_path):
    assert cpusched.throttled(str(tmp_path / "missing")) is True


@pytest.mark.parametrize("priority", [0, 100, -1])
def test_a_priority_out_of_range_is_refused_before_any_system_call(priority):
    with pytest.raises(cpusched.CpuSchedError, match=f"1 to 99, not {priority}"):
        cpusched.use_round_robin(priority)
    assert cpusched.realtime_policy() is None
