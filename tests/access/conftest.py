"""Real brokers with the authorizer on, and clients that are other local users.

The session makes the users ``hbalice`` and ``hbcarol`` (group ``hbteam``),
``hbbob`` and ``hbsuper``, all in ``hbclients``, and removes them at the end
(the tests run as root, here and in CI). A broker's Unix socket is made as an
operator would open it to them: in a directory of group ``hbclients`` with
the set-group-id bit (mode 2750), so the socket (0660) is of that group too.
A client runs as its user under ``setpriv --reuid --regid --init-groups``.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest

from hostbroker.security.store import write_acls
from tests.integration.broker import Broker

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USERS = {"hbalice": ("hbteam",), "hbcarol": ("hbteam",), "hbbob": (), "hbsuper": ()}
GROUPS = ("hbteam", "hbclients")


def _quiet(*args: str) -> None:
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _remove_users() -> None:
    for user in USERS:
        _quiet("userdel", user)
    for group in GROUPS:
        _quiet("groupdel", group)


@pytest.fixture(scope="session")
def users():
    """The test users, made for the session (any left by an earlier run first removed)."""
    if os.geteuid() != 0:
        pytest.fail("the access tests make users: run them as root")
    _remove_users()
    try:
        for group in GROUPS:
            subprocess.run(["groupadd", group], check=True)
        for user, extra in USERS.items():
            subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell",
                            "/usr/sbin/nologin", "--groups", ",".join((*extra, "hbclients")),
                            user], check=True)
        yield tuple(USERS)
    finally:
        _remove_users()


def run_as(user: str | None, uri: str, actions: list) -> list:
    """Run ``actions`` (tests/access/actions.py) against ``uri`` as ``user``
    (None: as this process's user, the broker's); what the broker answered."""
    command = [sys.executable, "-m", "tests.access.actions", uri, json.dumps(actions)]
    if user is not None:
        entry = pwd.getpwnam(user)
        command = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
                   "--init-groups", *command]
    env = {**os.environ, "PYTHONPATH": ROOT_DIR, "HOME": "/"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/",
                          env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def whoami_as(user: str | None, uri: str) -> subprocess.CompletedProcess:
    """``hostbroker whoami --json --bootstrap uri`` as ``user``."""
    command = [sys.executable, "-m", "hostbroker", "whoami", "--json", "--bootstrap", uri]
    if user is not None:
        entry = pwd.getpwnam(user)
        command = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
                   "--init-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/",
                          env={**os.environ, "PYTHONPATH": ROOT_DIR, "HOME": "/"})


class AccessBroker:
    """A broker with ``authorizer.enable`` and the ACLs it is given, its Unix
    socket open to the group ``hbclients``."""

    def __init__(self, root, bindings, **settings):
        self.sock_dir = tempfile.mkdtemp(prefix="hb-access-")
        os.chown(self.sock_dir, 0, grp.getgrnam("hbclients").gr_gid)
        os.chmod(self.sock_dir, 0o2750)
        settings.setdefault("authorizer_enable", "true")
        self.broker = Broker(root, **settings)
        self.broker.unix_path = os.path.join(self.sock_dir, "hb.sock")
        self.broker.settings["listeners"] = self.broker._listeners()
        self.broker._may_move = True
        self.log_dir = self.broker.settings["log.dirs"]
        os.makedirs(self.log_dir, exist_ok=True)
        write_acls(self.log_dir, bindings)

    @property
    def unix(self) -> str:
        return self.broker.unix

    @property
    def tcp(self) -> str:
        return self.broker.tcp

    def start(self) -> AccessBroker:
        self.broker.start()
        return self

    def restart(self, bindings=None, **settings) -> None:
        self.broker.stop()
        if bindings is not None:
            write_acls(self.log_dir, bindings)
        self.broker.settings.update({k.replace("_", "."): v for k, v in settings.items()})
        self.broker.start()

    def finish(self) -> None:
        try:
            self.broker.finish()
        finally:
            shutil.rmtree(self.sock_dir, ignore_errors=True)
