"""A broker of three log dirs started from a stale state file while the dir that
holds the newest copy holds it damaged: the start is uncertain, so the topic
created since is not deleted as a stray; ``logdirs online`` refuses the dir
while its copy is newer than the one the broker started from, without writing
over it; and the runbook's way out (the newer copy put in every dir, then a
restart) brings the topic back with every acknowledged message."""

from __future__ import annotations

import os
import time

import pytest

from tests.logdirs.support import (
    assert_all_acked,
    create,
    leader_dir,
    logdirs,
    poll,
    read_back,
    replica_dirs,
)
from tests.logdirs.test_start import STATE_FILE, _produce


@pytest.fixture(scope="module")
def broker(dirs_broker):
    return dirs_broker(3)


def test_a_damaged_newest_copy_keeps_the_start_uncertain(broker):
    create(broker, "before", 1, 3)  # (a first copy on every dir)
    assert broker.stop() == 0
    stale = {d: open(os.path.join(d, STATE_FILE), "rb").read() for d in broker.dirs}
    broker.start()
    create(broker, "since", 1, 2)
    log = _produce(broker, "since")
    holders = sorted(replica_dirs(broker, "since", 0))
    damaged = holders[-1]
    assert broker.stop() == 0
    newest = open(os.path.join(damaged, STATE_FILE), "rb").read()
    for d in broker.dirs:
        with open(os.path.join(d, STATE_FILE), "wb") as f:
            f.write(stale[d] if d != damaged else newest[: len(newest) // 2])
    before = len(broker.log())
    broker.start()
    time.sleep(1.5)  # (several passes: a stray would be deleted by now)
    for d in holders:
        assert os.path.isdir(os.path.join(d, "since_0")), d
    assert leader_dir(broker, "since", 0) is None
    assert "holds no readable state file" in broker.log()[before:]
    # the copy put right, but newer than the one the broker started from: refused,
    # and not written over
    with open(os.path.join(damaged, STATE_FILE), "wb") as f:
        f.write(newest)
    done = logdirs(broker, "online", "--log-dir", damaged, check=False)
    assert done.returncode == 1, done
    assert "holds a newer state file" in done.stderr.decode()
    assert open(os.path.join(damaged, STATE_FILE), "rb").read() == newest
    # the runbook: keep the newer copy (every dir), restart
    assert broker.stop() == 0
    for d in broker.dirs:
        with open(os.path.join(d, STATE_FILE), "wb") as f:
            f.write(newest)
    broker.start()
    poll(lambda: leader_dir(broker, "since", 0) is not None, 15, "since led again")
    assert_all_acked(log, read_back(broker, "since"))
