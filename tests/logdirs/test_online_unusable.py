"""``hostbroker logdirs online`` answers only once the dir is really back: one of
three log dirs is a tmpfs, pulled (``umount -l``) under a running broker; in its
place a filesystem that holds the dir's id but is read-only. Its files read
fine, so the dir is reopened; the writer's replacement cannot open it (its lock
file cannot be made). The tool says so and fails, and the dir stays offline.
Then the same dir, writable again: online, and the tool says so once it is."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.logdirs.support import DIR_OFFLINE, DIR_ONLINE, create, dir_states, logdirs, poll
from tests.mounts import mount_tmpfs, unmount

ID_FILE = "log-dir-id"


@pytest.fixture(scope="module")
def broker(dirs_broker):
    return dirs_broker(3, small="4m")


def test_online_on_a_dir_still_unusable_says_so(broker):
    small = os.path.abspath(broker.small)
    create(broker, "u", 1, 3)  # (a replica on every dir)
    with open(os.path.join(small, ID_FILE), "rb") as f:
        dir_id = f.read()
    subprocess.run(["umount", "-l", small], check=True, timeout=30)
    poll(lambda: dir_states(broker)[small] == DIR_OFFLINE, 10, "the pulled dir offline")
    mount_tmpfs(small, "1m")  # (the fixture's unmount takes it away at the end)
    try:
        with open(os.path.join(small, ID_FILE), "wb") as f:
            f.write(dir_id)
        subprocess.run(["mount", "-o", "remount,ro", small], check=True, timeout=30)
        done = logdirs(broker, "online", "--log-dir", small, check=False)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert f"log dir {small} is still unusable" in done.stderr.decode(), done.stderr
        assert dir_states(broker)[small] == DIR_OFFLINE
        # writable again: taken back, and answered once it is
        subprocess.run(["mount", "-o", "remount,rw", small], check=True, timeout=30)
        said = logdirs(broker, "online", "--log-dir", small).stdout.decode()
        assert f"log dir {small} is online" in said, said
        assert dir_states(broker)[small] == DIR_ONLINE
    finally:
        unmount(small)
