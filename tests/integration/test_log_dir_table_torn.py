"""A log dir table slot left mid-write on a real broker (two log dirs, so
``hb-logdirs`` runs): ``top`` and METADATA version 2 go on (the slot shows
``unknown`` while nobody can repair it), and it is repaired while the broker
runs: by hb-logdirs when it next looks, by the supervisor when it replaces a
dead hb-logdirs. The slot is torn for real: its seq made odd through the
shared memory, with hb-logdirs stopped, as a writer killed mid-write leaves it."""

from __future__ import annotations

import os
import signal
import struct
import time

import pytest

from hostbroker.config import Config
from hostbroker.shm.logdirs import LogDirTable
from hostbroker.shm.region import SharedRegion
from hostbroker.shm.table import TABLE_HEADER_SIZE
from hostbroker.workers.plan import BrokerPlan
from tests.integration.logdir_views import top_dirs, top_json, wire_dirs
from tests.integration.wire_helpers import wait_for


@pytest.fixture
def two_dirs(make_broker, tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    # (hb-logdirs is stopped for a while below: not for long enough to be aborted)
    broker = make_broker(log_dirs=",".join(dirs), worker_heartbeat_timeout_ms=60000,
                         num_processors=1, num_handlers=1)
    ids = [int(open(os.path.join(d, "log-dir-id")).read()) for d in dirs]
    return broker, dirs, ids


def _slot_seq(broker, index: int, odd: bool = False) -> int:
    """Slot ``index``'s seq, made odd first with ``odd`` (the tear)."""
    name = BrokerPlan.from_config(Config.build(overrides=[
        f"log.dirs={broker.settings['log.dirs']}"])).logdirs_name
    region = SharedRegion.attach(name)
    try:
        at = TABLE_HEADER_SIZE + index * LogDirTable.LAYOUT.slot_size
        (seq,) = struct.unpack_from("<Q", region.buf, at)
        if odd and not seq & 1:
            seq += 1
            struct.pack_into("<Q", region.buf, at, seq)
        return seq
    finally:
        region.close()


def test_a_torn_slot_is_unknown_until_hb_logdirs_looks_and_repairs_it(two_dirs):
    broker, dirs, ids = two_dirs
    online = [(ids[0], dirs[0], "online"), (ids[1], dirs[1], "online")]
    assert top_dirs(broker) == online
    logdirs = broker.workers()["hb-logdirs"]
    os.kill(logdirs, signal.SIGSTOP)
    try:
        _slot_seq(broker, 1, odd=True)
        started = time.monotonic()
        reading = top_json(broker)  # (a top without the fix failed here)
        assert time.monotonic() - started < 30
        assert [(r["id"], r["path"], r["state"]) for r in reading["log_dirs"]] == [
            online[0], (ids[1], dirs[1], "unknown")]
        assert wire_dirs(broker) == online  # handlers never read it through the seqlock
    finally:
        os.kill(logdirs, signal.SIGCONT)
    assert wait_for(lambda: _slot_seq(broker, 1) % 2 == 0, timeout=15)
    assert top_dirs(broker) == online
    assert broker.workers()["hb-logdirs"] == logdirs  # repaired, not replaced
    assert "died" not in broker.log()


def test_the_supervisor_repairs_a_slot_a_killed_hb_logdirs_left_mid_write(two_dirs):
    broker, dirs, ids = two_dirs
    logdirs = broker.workers()["hb-logdirs"]
    os.kill(logdirs, signal.SIGSTOP)
    _slot_seq(broker, 0, odd=True)
    os.kill(logdirs, signal.SIGKILL)
    broker.wait_worker_replaced("hb-logdirs", logdirs)
    assert wait_for(lambda: "repaired log dir table slot(s) [0] left mid-write" in broker.log(),
             timeout=15)
    assert _slot_seq(broker, 0) % 2 == 0
    assert top_dirs(broker) == [(ids[0], dirs[0], "online"), (ids[1], dirs[1], "online")]
