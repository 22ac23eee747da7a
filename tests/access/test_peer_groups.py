"""A Unix peer's groups are the ones its process had when it connected, as
the kernel says (``SO_PEERGROUPS``), not what the user database listed for
its login name the first time its processor saw the uid: a process that
dropped a group does not get that group's ACLs, and a user removed from a
group while the broker runs is no longer in it on the next connection."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys

import pytest

from tests.access.conftest import ROOT_DIR, AccessBroker, whoami_as


@pytest.fixture(scope="module")
def broker(users, tmp_path_factory):
    b = AccessBroker(tmp_path_factory.mktemp("peergroups"), [], num_processors=1)
    b.start()
    try:
        yield b
    finally:
        b.finish()


def groups_of(done: subprocess.CompletedProcess) -> set[str]:
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout)["groups"])


def test_a_process_that_dropped_its_groups_is_not_in_them(broker):
    assert "Group:hbteam" in groups_of(whoami_as("hbalice", broker.unix))
    entry = pwd.getpwnam("hbalice")
    done = subprocess.run(
        ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
         f"--groups={grp.getgrnam('hbclients').gr_gid}",  # (the socket's directory's)
         sys.executable, "-m", "hostbroker", "whoami", "--json", "--bootstrap", broker.unix],
        capture_output=True, text=True, timeout=60, cwd="/",
        env={**os.environ, "PYTHONPATH": ROOT_DIR, "HOME": "/"})
    # its gid and the one group it kept: /etc/group still lists hbalice in hbteam
    assert groups_of(done) == {"Group:hbalice", "Group:hbclients"}


def test_a_user_removed_from_a_group_is_out_of_it_on_the_next_connection(broker):
    assert "Group:hbteam" in groups_of(whoami_as("hbcarol", broker.unix))
    subprocess.run(["gpasswd", "-d", "hbcarol", "hbteam"], check=True, capture_output=True)
    try:
        assert "Group:hbteam" not in groups_of(whoami_as("hbcarol", broker.unix))
    finally:
        subprocess.run(["gpasswd", "-a", "hbcarol", "hbteam"], check=True, capture_output=True)
    assert "Group:hbteam" in groups_of(whoami_as("hbcarol", broker.unix))
