"""``hostbroker.cpulatency`` where no device is needed: what it refuses, in one line."""

import os

import pytest

from hostbroker import cpulatency


@pytest.mark.parametrize("us", [-1, cpulatency.MAX_US + 1])
def test_a_value_out_of_range_is_refused_before_the_device_is_touched(tmp_path, us):
    path = tmp_path / "device"
    with pytest.raises(cpulatency.CpuLatencyError, match=f"0 to {cpulatency.MAX_US} "
                       f"microseconds, not {us}"):
        cpulatency.hold(us, str(path))
    assert not path.exists()


def test_a_missing_device_is_named(tmp_path):
    path = str(tmp_path / "cpu_dma_latency")
    for call in (lambda: cpulatency.hold(0, path), lambda: cpulatency.current(path)):
        with pytest.raises(cpulatency.CpuLatencyError, match=f"{path} does not exist"):
            call()


def test_a_short_read_is_named(tmp_path):
    path = tmp_path / "short"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(cpulatency.CpuLatencyError, match="gave 2 bytes, not 4"):
        cpulatency.current(str(path))


def test_a_held_value_is_written_as_the_kernel_reads_it(tmp_path):
    """A plain file stands in for the device: the 4 bytes written are the
    native 32-bit int the kernel takes, and the descriptor stays open."""
    path = tmp_path / "file"
    path.write_bytes(b"")
    fd = cpulatency.hold(123456, str(path))
    try:
        assert cpulatency.current(str(path)) == 123456
    finally:
        os.close(fd)


def test_a_machine_without_a_cpuidle_driver_is_named(tmp_path):
    driver = tmp_path / "current_driver"
    driver.write_text("none\n")
    why = cpulatency.no_effect(str(driver))
    assert why is not None and "\n" not in why and f"{driver} says none" in why
    driver.write_text("")
    assert "says nothing" in cpulatency.no_effect(str(driver))
    for name in ("haltpoll\n", "intel_idle", "acpi_idle\n"):
        driver.write_text(name)
        assert cpulatency.no_effect(str(driver)) is None
    assert cpulatency.no_effect(str(tmp_path / "missing")) is None  # nothing known
