"""Standing cases: a log dir's replication state file past the broker's limits
(``logdirs.state.max.bytes``, ``logdirs.state.max.online``; issue 36).

Real broker on three log dirs with small limits. A copy longer than the byte
limit, or whose ``online`` list names more dirs than the other limit, is not
read: one line says which file and which limit, that dir counts as holding no
copy (kept out until ``logdirs online``), and the broker starts from the
other copies with every topic led. A change that would write a document past
the byte limit is refused in one line, and nothing accepted is lost. A limit
below the number of log dirs refuses the start in one line."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from tests.integration.broker import Broker
from tests.integration.cli import hostbroker, one_line_error
from tests.logdirs.support import SETTINGS, create, leader_dir, poll, replica_dirs

STATE_FILE = "log-dirs-state"
MAX_BYTES, MAX_ONLINE = 8192, 3


@pytest.fixture
def broker(tmp_path):
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    for d in dirs:
        os.mkdir(d)
    b = Broker(tmp_path, **{**SETTINGS, "log.dirs": ",".join(dirs),
                            "logdirs.state.max.bytes": MAX_BYTES,
                            "logdirs.state.max.online": MAX_ONLINE})
    b.dirs = dirs
    yield b
    try:
        b.stop(timeout=20)
    except Exception:  # noqa: BLE001 - already failing; leave nothing behind
        b.kill_tree()
    with contextlib.suppress(Exception):
        b.remove_leftovers()


def _lines(text: str, what: str) -> list[str]:
    return [line for line in text.splitlines() if what in line]


@pytest.mark.parametrize("past", ["bytes", "online"])
def test_a_copy_past_a_limit_is_not_read_and_the_others_serve(broker, past):
    broker.start()
    create(broker, "t", 1, 2)
    # (the dir without a replica of t: t's ISR does not wait for it)
    (spoiled,) = set(broker.dirs) - replica_dirs(broker, "t", 0)
    assert broker.stop() == 0
    path = os.path.join(spoiled, STATE_FILE)
    raw = open(path, "rb").read()
    if past == "bytes":
        raw = raw[:-1] + b" " * MAX_BYTES + b"}"  # (valid JSON, too long)
        said = f"longer than logdirs.state.max.bytes {MAX_BYTES}"
    else:
        doc = json.loads(raw)
        doc["online"] = list(range(1, MAX_ONLINE + 3))
        raw = json.dumps(doc).encode()
        said = f"over logdirs.state.max.online {MAX_ONLINE}"
    with open(path, "wb") as f:
        f.write(raw)
    before = len(broker.log())
    broker.start()
    lines = _lines(broker.log()[before:], said)
    unusable = [line for line in lines if "state file unusable" in line]
    assert len(unusable) == 1 and path in unusable[0], broker.log()[before:]
    poll(lambda: leader_dir(broker, "t", 0) is not None, 15, "t led from the other copies")
    assert open(path, "rb").read() == raw  # that copy not used, not written over


def test_a_change_past_the_byte_limit_is_refused_and_loses_nothing(broker):
    broker.start()
    create(broker, "t", 1, 2)
    kept = {d: open(os.path.join(d, STATE_FILE), "rb").read() for d in broker.dirs}
    done = hostbroker("topics", "create", "--bootstrap", broker.unix, "--topic", "wide",
                      "--partitions", 200, "--replication-factor", 2)
    line = one_line_error(done)
    assert f"over logdirs.state.max.bytes {MAX_BYTES}" in line, line
    for d in broker.dirs:
        doc = json.loads(open(os.path.join(d, STATE_FILE), "rb").read())
        assert "wide" not in doc["topics"] and "t" in doc["topics"]
        assert not os.path.exists(os.path.join(d, "wide_0"))
    assert kept  # (the copies still decode and name t: nothing accepted lost)
    assert leader_dir(broker, "t", 0) is not None


def test_a_limit_below_the_log_dirs_refuses_the_start(tmp_path):
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    for d in dirs:
        os.mkdir(d)
    done = subprocess.run(
        [sys.executable, "-m", "hostbroker", "serve", "--set", f"log.dirs={','.join(dirs)}",
         "--set", "logdirs.state.max.online=2", "--set", f"listeners=unix://{tmp_path}/s",
         "--set", "http.listeners="],
        capture_output=True, timeout=60)
    assert done.returncode != 0
    assert "logdirs.state.max.online 2 is below the 3 log.dirs" in done.stderr.decode()
