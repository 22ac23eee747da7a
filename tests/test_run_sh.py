"""``tools/run.sh`` as a new user runs it: the set-up says what it is doing, and
``tools/run.sh zookeeper`` starts a ZooKeeper that a client can use."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.ports import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_SH = os.path.join(ROOT, "tools", "run.sh")


def _tree(tmp_path) -> str:
    """A checkout of only what the set-up reads before pip: run.sh and pyproject.toml."""
    (tmp_path / "tools").mkdir()
    shutil.copy(RUN_SH, tmp_path / "tools" / "run.sh")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    return str(tmp_path / "tools" / "run.sh")


def test_setup_says_each_step_in_one_line(tmp_path):
    # A fresh checkout, and a pip that finds no package (no index): the set-up gets as far
    # as pip, saying each step first, and stops with one line saying why.
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "none")}
    result = subprocess.run([_tree(tmp_path), "setup"], capture_output=True, timeout=300,
                            env=env, stdin=subprocess.DEVNULL)
    said = [line for line in result.stderr.decode().splitlines()
            if line.startswith("tools/run.sh: ")]
    assert result.returncode != 0
    assert [line.split(":")[1].split()[0] for line in said] == ["making", "pip", "pip"], said
    assert said[0].startswith("tools/run.sh: making the venv .venv (")
    assert said[1].startswith("tools/run.sh: pip: installing hostbroker[test,spark,bench]")
    assert said[2].startswith("tools/run.sh: pip could not install hostbroker[test,spark,bench]")
    assert "Traceback" not in result.stderr.decode()
    assert result.stdout == b""  # nothing for CI's log but the steps


@pytest.mark.skipif(not os.path.exists("/usr/share/java/zookeeper.jar"),
                    reason="Debian's zookeeper package is not installed")
def test_zookeeper_command_serves_a_client(tmp_path):
    from kazoo.client import KazooClient

    port = free_port()
    where = tmp_path / "elsewhere"  # a relative --data-dir is where the user stands
    where.mkdir()
    data = where / "zk"
    proc = subprocess.Popen([_tree(tmp_path), "zookeeper", "--port", str(port),
                             "--data-dir", "zk"], cwd=where,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "zk.log", "wb"),
                            stdin=subprocess.DEVNULL)
    client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client.start(timeout=2)
                break
            except Exception:  # noqa: BLE001 - the JVM is still starting
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((tmp_path / "zk.log").read_text(errors="replace"))
        client.create("/hostbroker/brokers", b"x", makepath=True)
        assert client.get("/hostbroker/brokers")[0] == b"x"
    finally:
        client.stop()
        client.close()
        proc.send_signal(signal.SIGTERM)  # run.sh exec'd into the JVM: this PID is the server
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    config = (data / "zoo.cfg").read_text()
    assert f"clientPort={port}\n" in config and "clientPortAddress=127.0.0.1\n" in config
    assert "admin.enableServer=false\n" in config
    said = (tmp_path / "zk.log").read_text(errors="replace").splitlines()
    assert said[0] == (f"tools/run.sh: ZooKeeper on 127.0.0.1:{port}, data in {data} "
                       f"(zookeeper.connect=127.0.0.1:{port})")
    assert os.path.isdir(data / "version-2")  # it kept its data where it was told
