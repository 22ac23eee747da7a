"""A state file copy that ``logdirs online`` refused stays refused: real broker,
three log dirs.

The broker starts uncertain (the dir holding the newest copy holds it damaged);
the copy is put right and ``logdirs online`` refuses it as newer. Topics are
created after (this broker's own state goes on past the refused copy's seq);
a plain restart then starts from this broker's copy but holds the refused dir
offline, deletes none of the replicas only the refused copy assigns, and says
the way out in one line. Each way out of the runbook is taken: keep this
broker's state (``forget`` then ``online``), or take the refused copy (put in
every dir while stopped)."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.logdirs.support import (
    DIR_OFFLINE,
    DIR_ONLINE,
    assert_all_acked,
    create,
    dir_states,
    leader_dir,
    logdirs,
    poll,
    read_back,
    replica_dirs,
)
from tests.logdirs.test_start import STATE_FILE, _dir_id, _produce


@pytest.fixture(scope="module")
def broker(dirs_broker):
    return dirs_broker(3)


def _copy(d: str) -> bytes:
    with open(os.path.join(d, STATE_FILE), "rb") as f:
        return f.read()


def _put(d: str, data: bytes) -> None:
    with open(os.path.join(d, STATE_FILE), "wb") as f:
        f.write(data)


def _refused_then_restarted(broker, name: str):
    """Make ``name`` known only to one dir's copy, have it refused, write on past
    its seq, restart; (refused dir, its copy, the replica dirs of ``name``, the
    acknowledged log, the log's length before the restart)."""
    if broker.proc is None:
        broker.start()
    create(broker, f"{name}-before", 1, 3)  # (a first copy on every dir)
    assert broker.stop() == 0
    stale = {d: _copy(d) for d in broker.dirs}
    broker.start()
    create(broker, name, 1, 2)
    log = _produce(broker, name)
    holders = sorted(replica_dirs(broker, name, 0))
    refused = holders[-1]
    assert broker.stop() == 0
    newest = _copy(refused)
    for d in broker.dirs:
        _put(d, stale[d] if d != refused else newest[: len(newest) // 2])
    broker.start()  # uncertain: the newest copy is damaged
    _put(refused, newest)
    done = logdirs(broker, "online", "--log-dir", refused, check=False)
    assert done.returncode == 1, done
    said = done.stderr.decode()
    assert "holds a newer state file" in said and "logdirs forget" in said, said
    assert len(said.strip().splitlines()) == 1, said
    # later changes: this broker's seq goes past the refused copy's
    other = next(d for d in broker.dirs if d != refused)
    for i in range(30):
        if json.loads(_copy(other))["seq"] > json.loads(newest)["seq"]:
            break
        create(broker, f"{name}-later{i}", 1, 2)
    else:
        pytest.fail("the broker's seq never passed the refused copy's")
    create(broker, f"{name}-after", 1, 2)
    assert broker.stop() == 0
    before = len(broker.log())
    broker.start()  # a plain restart
    return refused, newest, holders, log, before


def test_a_restart_holds_the_refused_dir_and_keeping_this_state_takes_it_back(broker):
    refused, newest, holders, log, before = _refused_then_restarted(broker, "kept")
    time.sleep(1.5)  # (several passes: a stray would be deleted by now)
    for d in holders:
        assert os.path.isdir(os.path.join(d, "kept_0")), d
    assert dir_states(broker)[refused] == DIR_OFFLINE
    assert _copy(refused) == newest  # never written over
    said = broker.log()[before:]
    line = [s for s in said.splitlines() if f"--log-dir-id {_dir_id(refused)}" in s]
    assert line and "logdirs online --log-dir" in line[0], said
    # keep this broker's state: forget the refused copy, take the dir back
    logdirs(broker, "forget", "--log-dir-id", str(_dir_id(refused)))
    logdirs(broker, "online", "--log-dir", refused)
    poll(lambda: dir_states(broker)[refused] == DIR_ONLINE, 15, "the dir online again")
    # "kept" is only the refused copy's: its replicas are strays now, deleted
    poll(lambda: not any(os.path.isdir(os.path.join(d, "kept_0")) for d in holders), 15,
         "kept's replicas deleted as strays")
    poll(lambda: leader_dir(broker, "kept-after", 0) is not None, 15, "kept-after led")
    mine = json.loads(_copy(next(d for d in broker.dirs if d != refused)))
    poll(lambda: json.loads(_copy(refused)).get("history") == mine["history"] or
         json.loads(_copy(refused))["seq"] > mine["seq"], 15, "the dir's copy written again")
    assert log  # (what was acknowledged to "kept" was given up by the operator)


def test_taking_the_refused_copy_brings_back_what_only_it_knew(broker):
    refused, newest, holders, log, before = _refused_then_restarted(broker, "taken")
    assert leader_dir(broker, "taken", 0) is None
    assert dir_states(broker)[refused] == DIR_OFFLINE
    # take that copy: stopped, into every dir
    assert broker.stop() == 0
    for d in broker.dirs:
        _put(d, newest)
    broker.start()
    poll(lambda: leader_dir(broker, "taken", 0) is not None, 15, "taken led again")
    assert dir_states(broker)[refused] == DIR_ONLINE
    assert_all_acked(log, read_back(broker, "taken"))
