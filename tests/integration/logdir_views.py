"""How a real broker's log dirs are shown: ``hostbroker top`` (``--json`` and its
table), METADATA version 2 and ``hostbroker logdirs list --json``, each read
as an operator or a client reads it. Only test code."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess

from hostbroker.protocol import logdirs as lproto
from tests.integration.cli import hostbroker

WIRE_STATES = {lproto.DIR_ONLINE: "online", lproto.DIR_OFFLINE: "offline",
               lproto.DIR_MISSING: "missing"}


def _top_args(broker) -> list[str]:
    args = ["top", "--interval", "0.1", "--iterations", "1"]
    for key in ("log.dirs", "broker.id", "zookeeper.connect"):
        if key in broker.settings:
            args += ["--set", f"{key}={broker.settings[key]}"]
    return args


def top_json(broker) -> dict:
    done = hostbroker(*_top_args(broker), "--json", timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return json.loads(done.stdout.decode().splitlines()[-1])


def top_text(broker) -> list[str]:
    done = hostbroker(*_top_args(broker), timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode().splitlines()


def top_dirs(broker) -> list[tuple[int, str, str]]:
    """(id, path, state) of each row of ``top --json``'s log dirs."""
    return [(r["id"], r["path"], r["state"]) for r in top_json(broker)["log_dirs"]]


def wire_dirs(broker) -> list[tuple[int, str, str]]:
    """(id, path, state) of each log dir of a METADATA v2 answer."""
    with broker.client() as c:
        answer = c.metadata_v2()
    return [(d.dir_id, d.path, WIRE_STATES[d.state]) for d in answer.log_dirs]


def listed_dirs(broker) -> list[dict]:
    """``hostbroker logdirs list --json``'s rows."""
    done = hostbroker("logdirs", "list", "--json", "--bootstrap", broker.unix, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return json.loads(done.stdout)["log_dirs"]


@contextlib.contextmanager
def unusable(log_dir: str):
    """A log dir its writer cannot use at start: its lock file immutable
    (``chattr +i``: root may not open it for writing); as it was after."""
    os.makedirs(log_dir, exist_ok=True)
    lock = os.path.join(log_dir, ".lock")
    open(lock, "ab").close()
    subprocess.run(["chattr", "+i", lock], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", lock], check=True)
