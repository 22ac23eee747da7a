"""The broker under a service manager: sd_notify over a real NOTIFY_SOCKET, and
the shipped unit, sysusers.d and tmpfiles.d files checked with systemd's tools."""

import ipaddress
import os
import pathlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time

import pytest

from hostbroker.config import Config, parse_listener
from hostbroker.errors import ExitStatus


def messages_until(sock: socket.socket, wanted: str, timeout: float = 20.0) -> list[str]:
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            break
        if any(wanted in m for m in got):
            return got
    raise AssertionError(f"no {wanted!r} among {got}")


def test_ready_watchdog_and_stopping_are_sent(make_broker, tmp_path):
    path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    broker = make_broker(start=False)
    broker.env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"}
    broker.start()
    got = messages_until(listener, "READY=1")
    assert any("STATUS=serving" in m for m in got)
    # once ready, ping the watchdog at half its period (0.1 s here)
    t = time.monotonic()
    pings = 0
    while time.monotonic() - t < 1.0:
        pings += sum("WATCHDOG=1" in m for m in messages_until(listener, "WATCHDOG=1", 1))
    assert pings >= 6, f"{pings} watchdog pings in a second; systemd wants one per 0.2 s"

    assert broker.stop() == 0
    assert any("STOPPING=1" in m for m in messages_until(listener, "STOPPING=1", 5))
    listener.close()


def test_extend_timeout_is_sent_while_starting(make_broker, tmp_path):
    """Log recovery can outlast TimeoutStartSec: the supervisor asks for more
    time while it waits for its workers (the writers first), before READY=1.

    Which worker the first request names depends on which is still starting
    when the supervisor first looks (a writer with an empty log dir can be
    ready by then, leaving the coordinator): any of this broker's workers,
    the writer's status saying it recovers its log dir."""
    path = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    broker = make_broker(start=False)
    broker.env = {"NOTIFY_SOCKET": path}
    broker.start()
    got = messages_until(listener, "READY=1")
    ready = next(i for i, m in enumerate(got) if "READY=1" in m)
    extends = [m for m in got[:ready] if "EXTEND_TIMEOUT_USEC=" in m]
    assert extends, got
    # a standalone broker with one log dir: the workers it starts (no hb-http)
    workers = {("writer", 0), ("coordinator", 0), ("acceptor", 0),
               *((kind, i) for kind in ("handler", "processor")
                 for i in range(broker.settings[f"num.{kind}s"]))}
    assert len(broker.settings["log.dirs"].split(",")) == 1
    named = re.fullmatch(r"EXTEND_TIMEOUT_USEC=15000000\nSTATUS=starting: waiting for "
                         r"(\w+) (\d+)( \(recovering its log dir\))?(\nWATCHDOG=1)?", extends[0])
    assert named, extends[0]
    kind, index, recovering = named[1], int(named[2]), named[3]
    assert (kind, index) in workers, extends[0]
    assert bool(recovering) == (kind == "writer"), extends[0]
    assert broker.stop() == 0
    listener.close()


# The unit and its install files, checked with the tools systemd installs them with.

SYSTEMD = pathlib.Path(__file__).parent.parent.parent / "systemd"


def _systemd_tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: tools/run.sh setup installs it (apt-get install systemd)"
    return path


def _unit(tmp_path, name: str = "hostbroker.service") -> pathlib.Path:
    """A shipped unit with ExecStart pointing at this checkout's hostbroker."""
    text = (SYSTEMD / name).read_text()
    exe = pathlib.Path(sys.executable).parent / "hostbroker"
    assert exe.exists(), exe
    text = text.replace("/opt/hostbroker/.venv/bin/hostbroker", str(exe))
    unit = tmp_path / name
    unit.write_text(text)
    return unit


def _unit_values(key: str, name: str = "hostbroker.service") -> list[str]:
    values = []
    for line in (SYSTEMD / name).read_text().splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == key:
            values += v.split()
    return values


UNITS = ("hostbroker.service", "hostbroker-cpu-latency.service")
INSTALLED = "/opt/hostbroker/.venv/bin/hostbroker"  # where systemd/README.md installs it


def _verify_as_installed(unit: pathlib.Path) -> subprocess.CompletedProcess:
    """``systemd-analyze verify`` of ``unit``, unchanged, on a machine where the
    README's install steps have run: in a mount namespace of its own (the
    machine's /opt is not touched), /opt holds ``.venv/bin/hostbroker`` as
    the steps leave it, this checkout's entry point."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a private /opt needs root and unshare")
    exe = pathlib.Path(sys.executable).parent / "hostbroker"
    assert exe.exists(), exe
    script = (f"mount -t tmpfs tmpfs /opt && mkdir -p {os.path.dirname(INSTALLED)} && "
              f"ln -s {shlex.quote(str(exe))} {INSTALLED} && "
              f"exec {_systemd_tool('systemd-analyze')} verify {shlex.quote(str(unit))}")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", UNITS)
def test_unit_as_shipped_verifies_once_installed(name):
    """The shipped file itself, not a copy with another ExecStart: its paths are
    where the README's steps put the program."""
    assert _unit_values("ExecStart", name)[0] == INSTALLED
    result = _verify_as_installed(SYSTEMD / name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert name not in result.stderr, result.stderr  # no warning about it


@pytest.mark.parametrize("name", UNITS)
def test_unit_verifies_with_the_readmes_path_rewrite(tmp_path, name):
    """A checkout anywhere else: the README's install step rewrites /opt/hostbroker
    to it; the result verifies (systemd-analyze checks ExecStart is executable)."""
    readme = (SYSTEMD / "README.md").read_text()
    rewrite = re.search(r'sed "s\|/opt/hostbroker/\|\$ROOT/\|g"', readme)
    assert rewrite, "the README's install step rewrites the unit's paths"
    root = pathlib.Path(sys.executable).parent.parent.parent
    text = (SYSTEMD / name).read_text().replace("/opt/hostbroker/", f"{root}/")
    unit = tmp_path / name
    unit.write_text(text)
    result = subprocess.run([_systemd_tool("systemd-analyze"), "verify", str(unit)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert name not in result.stderr, result.stderr


def _exposure(tmp_path, name: str) -> float:
    result = subprocess.run([_systemd_tool("systemd-analyze"), "security", "--offline=yes",
                             str(_unit(tmp_path, name))], capture_output=True, text=True,
                            timeout=60)
    match = re.search(rf"Overall exposure level for {re.escape(name)}: (\d+\.\d+)",
                      result.stdout)
    assert match, result.stdout + result.stderr
    return float(match.group(1))


def test_the_exposure_the_docs_claim_is_the_one_systemd_rates(tmp_path):
    readme = (SYSTEMD / "README.md").read_text()
    service = _exposure(tmp_path, "hostbroker.service")
    latency = _exposure(tmp_path, "hostbroker-cpu-latency.service")
    assert f"`systemd-analyze security` {service}" in readme
    assert f"exposure {latency}" in readme
    claims = {float(x) for x in re.findall(r"(?:exposure|security`) (\d+\.\d)", readme)}
    assert claims <= {service, latency}, claims
    for name, rating in (("hostbroker.service", service),
                         ("hostbroker-cpu-latency.service", latency)):
        stated = re.search(r"rates it (\d+\.\d)", (SYSTEMD / name).read_text())
        assert stated and float(stated.group(1)) == rating, (name, rating)


def test_the_system_cleans_up_the_services_ipc():
    """Shared memory and semaphores of the service's user go when the unit stops,
    whatever killed the broker (its own sweep needs a next start)."""
    assert _unit_values("RemoveIPC") == ["yes"]
    assert _unit_values("PrivateIPC") == ["yes"]
    assert _unit_values("User") != ["root"]  # RemoveIPC= spares root
    assert _unit_values("UMask") == ["0027"]


@pytest.mark.parametrize("name", UNITS)
def test_unit_exposure_is_at_most_2_5(tmp_path, name):
    result = subprocess.run([_systemd_tool("systemd-analyze"), "security", "--offline=yes",
                             str(_unit(tmp_path, name))], capture_output=True, text=True,
                            timeout=60)
    match = re.search(rf"Overall exposure level for {re.escape(name)}: (\d+\.\d+)",
                      result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 2.5, result.stdout


def test_the_realtime_drop_in_verifies_and_keeps_the_sandbox(tmp_path):
    """systemd reads a unit's drop-ins from ``<unit>.d/`` beside it; the drop-in
    sets the policy the broker's processes inherit (tests/integration/
    test_realtime.py starts a broker under that policy given from outside, as
    systemd would, for real) and leaves RestrictRealtime=yes and the exposure
    as they were."""
    unit = _unit(tmp_path)
    (tmp_path / "hostbroker.service.d").mkdir()
    drop_in = tmp_path / "hostbroker.service.d" / "realtime.conf"
    drop_in.write_text((SYSTEMD / "hostbroker-realtime.conf").read_text())
    tool = _systemd_tool("systemd-analyze")
    result = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "realtime.conf" not in result.stderr, result.stderr  # every key known
    values = dict(line.split("=", 1) for line in drop_in.read_text().splitlines()
                  if "=" in line and not line.startswith("#"))
    assert values == {"CPUSchedulingPolicy": "rr", "CPUSchedulingPriority": "1"}
    assert _unit_values("RestrictRealtime") == ["yes"]
    result = subprocess.run([tool, "security", "--offline=yes", str(unit)],
                            capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for hostbroker.service: (\d+\.\d+)",
                      result.stdout)
    assert match and float(match.group(1)) <= 2.5, result.stdout + result.stderr


def test_the_cpu_latency_unit_holds_the_request_beside_the_broker_and_nothing_else():
    """It runs ``hostbroker cpu-latency --hold`` (tests/integration/test_cpu_latency.py
    runs that for real), is up before the broker and stops with it, and may open
    one device."""
    name = "hostbroker-cpu-latency.service"
    assert _unit_values("ExecStart", name)[1:4] == ["cpu-latency", "--hold", "0"]
    assert _unit_values("Type", name) == ["notify"]  # the broker starts once it is held
    assert _unit_values("Before", name) == _unit_values("PartOf", name) == ["hostbroker.service"]
    assert _unit_values("WantedBy", name) == ["hostbroker.service"]
    assert _unit_values("DevicePolicy", name) == ["closed"]
    assert _unit_values("DeviceAllow", name) == ["/dev/cpu_dma_latency", "rw"]
    assert "\nCapabilityBoundingSet=\n" in (SYSTEMD / name).read_text()  # none at all
    assert _unit_values("PrivateNetwork", name) == ["yes"]
    assert sorted(map(int, _unit_values("RestartPreventExitStatus", name))) == sorted(
        [ExitStatus.USAGE, ExitStatus.REFUSED])


def test_restarts_are_prevented_only_for_refusals():
    assert sorted(map(int, _unit_values("RestartPreventExitStatus"))) == sorted(
        [ExitStatus.USAGE, ExitStatus.REFUSED])
    assert ExitStatus.CRASHED not in map(int, _unit_values("RestartPreventExitStatus"))
    assert _unit_values("Restart") == ["on-failure"]


def test_example_config_listens_on_loopback_in_the_units_paths():
    config = Config.load(str(SYSTEMD / "hostbroker.toml"))
    for uri in config.listeners:
        parsed = parse_listener(uri)
        if parsed[0] == "tcp":
            assert ipaddress.ip_address(parsed[1]).is_loopback, uri
        else:
            runtime = "/run/" + _unit_values("RuntimeDirectory")[0] + "/"
            assert parsed[1].startswith(runtime), uri
    assert sorted(config.log_dirs) == sorted(_unit_values("ReadWritePaths"))


def test_sysusers_and_tmpfiles_make_the_user_and_its_log_dirs(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for tool, name in (("systemd-sysusers", "hostbroker.sysusers"),
                       ("systemd-tmpfiles", "hostbroker.tmpfiles")):
        args = [_systemd_tool(tool), f"--root={root}"]
        args += ["--create"] if tool == "systemd-tmpfiles" else []
        result = subprocess.run(args + [str(SYSTEMD / name)], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    user = next(line.split(":") for line in (root / "etc/passwd").read_text().splitlines()
                if line.startswith("hostbroker:"))
    assert user[5] == "/var/lib/" + _unit_values("StateDirectory")[0]
    uid = int(user[2])
    for log_dir in Config.load(str(SYSTEMD / "hostbroker.toml")).log_dirs:
        st = (root / log_dir.lstrip("/")).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, int(user[3]), 0o750), log_dir
