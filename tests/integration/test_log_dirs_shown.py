"""A standalone broker's log dirs as ``top`` (``--json`` and its table),
METADATA version 2 and ``logdirs list`` show them, on real brokers: a one-dir
broker's dir has no id (-1) and shows online while its writer serves it; on
two dirs each has its id; a dir its writer cannot use shows offline. (A
cluster broker's: tests/cluster/test_log_dirs_shown_zk.py.)"""

from __future__ import annotations

import os

from tests.integration.logdir_views import (listed_dirs, top_dirs, top_json, top_text,
                                            unusable, wire_dirs)


def test_a_one_dir_broker_shows_its_dir_online_without_an_id(broker):
    logs = broker.settings["log.dirs"]
    with broker.client() as c:
        c.create_topic("plain", 2)
        (topic,) = c.metadata_v2(["plain"]).topics
    assert [(p.leader_dir, p.replica_dirs, p.isr_dirs) for p in topic.partitions] == [
        (-1, (), ())] * 2
    assert top_dirs(broker) == [(-1, logs, "online")]
    assert wire_dirs(broker) == [(-1, logs, "online")]
    assert listed_dirs(broker) == [{"id": -1, "path": logs, "state": "online",
                                    "replicas": 2, "leaders": 2, "under_replicated": 0}]
    assert top_json(broker)["offline_log_dirs"] == []


def test_two_dirs_show_their_ids_and_a_dir_that_failed_shows_offline(make_broker, tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    broker = make_broker(log_dirs=",".join(dirs), start=False)
    with unusable(dirs[1]):
        broker.start()
        assert f"log dir {dirs[1]} is offline" in broker.log()
        ids = [int(open(os.path.join(d, "log-dir-id")).read()) for d in dirs]
        expected = [(ids[0], dirs[0], "online"), (ids[1], dirs[1], "offline")]
        assert top_dirs(broker) == expected
        assert wire_dirs(broker) == expected
        assert [(r["id"], r["path"], r["state"]) for r in listed_dirs(broker)] == expected
        # (top cuts a long path in the middle, to fit 100 columns)
        table = [line.split() for line in top_text(broker) if line.startswith(dirs[0][:13])]
        assert [(row[0][-3:], row[1], row[2]) for row in table] == [
            (d[-3:], str(i), s) for i, d, s in expected]
        assert broker.stop() == 0
