"""What a broker of three log dirs finds at start, stopping and starting its one
broker between the tests (in order): a leader's replica garbled (a bad
``partition.json``, a segment replaced by a dir) and then a whole dir unusable
(its id file a directory: root ignores ``chmod``) while the broker was down:
the other replicas lead and every acknowledged message reads back. The newest
copy of the state file wins; a replaced, empty disk gets a new id; a state
that names a dir no longer there keeps that dir's partitions leaderless until
``logdirs forget``; two dirs holding one id are refused."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from hostbroker.shm.partitions import ROLE_LEADER
from tests.logdirs.support import (
    DIR_OFFLINE,
    AckedLog,
    assert_all_acked,
    create,
    dir_states,
    leader_dir,
    logdirs,
    poll,
    read_back,
    replica_dirs,
    replica_slots,
)

ID_FILE = "log-dir-id"
STATE_FILE = "log-dirs-state"


@pytest.fixture(scope="module")
def broker(dirs_broker):
    return dirs_broker(3)


def _produce(broker, topic: str, partitions: int = 1) -> AckedLog:
    log = AckedLog(broker, topic, partitions, max_bytes=100_000)
    log.start()
    log.join(60)
    log.stop()
    return log


def _dir_id(path: str) -> int:
    with open(os.path.join(path, ID_FILE)) as f:
        return int(f.read())


def _led_elsewhere(broker, topic: str, old: str) -> bool:
    now = leader_dir(broker, topic, 0)
    return now is not None and now != old


def test_a_garbled_leader_replica_leaves_the_others_leading(broker):
    create(broker, "pj", 1, 2)
    create(broker, "seg", 1, 2, "segment.bytes=4096")
    logs = {topic: _produce(broker, topic) for topic in ("pj", "seg")}
    leaders = {topic: leader_dir(broker, topic, 0) for topic in ("pj", "seg")}
    assert broker.stop() == 0
    with open(os.path.join(leaders["pj"], "pj_0", "partition.json"), "wb") as f:
        f.write(b'{"topic": "pj", "partit')
    seg_dir = os.path.join(leaders["seg"], "seg_0")
    first = sorted(n for n in os.listdir(seg_dir) if n.endswith(".kafka"))[0]
    os.remove(os.path.join(seg_dir, first))
    os.mkdir(os.path.join(seg_dir, first))
    broker.start()
    for topic, log in logs.items():
        poll(lambda topic=topic: _led_elsewhere(broker, topic, leaders[topic]), 15,
             f"{topic} led by its undamaged replica")
        assert_all_acked(log, read_back(broker, topic))


def test_a_dir_unusable_at_start_leaves_the_others_leading(broker):
    create(broker, "whole", 1, 2)
    log = _produce(broker, "whole")
    leader = leader_dir(broker, "whole", 0)
    id_path = os.path.join(leader, ID_FILE)
    with open(id_path, "rb") as f:
        saved = f.read()
    assert broker.stop() == 0
    os.remove(id_path)
    os.mkdir(id_path)  # unreadable as an id file, whatever root's rights
    try:
        broker.start()
        poll(lambda: _led_elsewhere(broker, "whole", leader), 15, "whole led from another dir")
        assert_all_acked(log, read_back(broker, "whole"))
        assert dir_states(broker)[leader] == DIR_OFFLINE
        assert broker.stop() == 0
    finally:
        os.rmdir(id_path)
        with open(id_path, "wb") as f:
            f.write(saved)
        os.chmod(id_path, 0o640)
    broker.start()

    def full() -> bool:
        return any(s.role == ROLE_LEADER and len(s.isr_ids) == 2
                   for _, s in replica_slots(broker, "whole", 0))

    poll(full, 20, "whole's replica on the restored dir back in the ISR")


def test_the_newest_state_file_wins(broker):
    assert broker.stop() == 0
    stale = {d: open(os.path.join(d, STATE_FILE), "rb").read() for d in broker.dirs}
    broker.start()
    create(broker, "fresh", 1, 3)
    log = _produce(broker, "fresh")
    assert broker.stop() == 0
    newest = json.loads(open(os.path.join(broker.dirs[2], STATE_FILE), "rb").read())
    assert "fresh" in newest["topics"]
    for d in broker.dirs[:2]:  # two of three copies from before "fresh" was made
        with open(os.path.join(d, STATE_FILE), "wb") as f:
            f.write(stale[d])
    broker.start()
    poll(lambda: leader_dir(broker, "fresh", 0) is not None, 15, "fresh led after the restart")
    assert len(replica_slots(broker, "fresh", 0)) == 3
    assert_all_acked(log, read_back(broker, "fresh"))


def test_a_replaced_empty_disk_gets_a_new_id(broker):
    old = {d: _dir_id(d) for d in broker.dirs}
    replaced = broker.dirs[2]
    assert broker.stop() == 0
    shutil.rmtree(replaced)
    os.mkdir(replaced, 0o750)
    broker.start()
    new = _dir_id(replaced)
    assert new not in old.values(), (new, old)
    assert new > max(old.values())


def _state_leader(broker, topic: str, partition: int) -> int:
    """The partition's leader in the newest state file copy of the broker's dirs."""
    copies = [json.load(open(os.path.join(d, STATE_FILE))) for d in broker.dirs
              if os.path.exists(os.path.join(d, STATE_FILE))]
    newest = max(copies, key=lambda c: c["seq"])
    return newest["topics"][topic]["partitions"][str(partition)]["leader"]


def test_a_missing_dir_keeps_its_partitions_leaderless_until_forgotten(broker):
    create(broker, "lost", 1, 2)
    log = _produce(broker, "lost")
    dirs = list(broker.dirs)
    # the dir to lose: a replica of "lost" that is not the first configured dir (the
    # broker's shared memory is named after that one)
    gone = sorted(d for d in replica_dirs(broker, "lost", 0) if d != dirs[0])[0]
    gone_id = _dir_id(gone)
    assert broker.stop() == 0
    broker.settings["log.dirs"] = ",".join(d for d in dirs if d != gone)
    broker.dirs = [d for d in dirs if d != gone]
    before = len(broker.log())
    try:
        broker.start()
        # (what hb-logdirs decided, not the roles, which lag it)
        assert _state_leader(broker, "lost", 0) == -1
        said = broker.log()[before:]
        assert gone in said or f"log dir id {gone_id}" in said, said
        assert leader_dir(broker, "lost", 0) is None
        logdirs(broker, "forget", "--log-dir-id", gone_id)
        poll(lambda: leader_dir(broker, "lost", 0) is not None, 15, "lost led after forget")
        assert_all_acked(log, read_back(broker, "lost"))
    finally:
        if broker.proc is not None:
            broker.stop()
        broker.settings["log.dirs"] = ",".join(dirs)
        broker.dirs = dirs


def test_two_dirs_with_one_id_are_refused(broker):
    if broker.proc is not None:
        assert broker.stop() == 0
    a, b = broker.dirs[0], broker.dirs[1]
    saved = open(os.path.join(b, ID_FILE), "rb").read()
    shutil.copyfile(os.path.join(a, ID_FILE), os.path.join(b, ID_FILE))
    try:
        with pytest.raises(RuntimeError) as e:
            broker.start()
        assert "broker exited with 78" in str(e.value)
        assert f"log.dirs: {a} and {b} both hold log dir id {_dir_id(a)} (a copied dir?)" \
            in str(e.value)
    finally:
        with open(os.path.join(b, ID_FILE), "wb") as f:
            f.write(saved)
