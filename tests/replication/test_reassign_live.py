"""A reassignment while a producer runs: real brokers on a real ZooKeeper, a
partition moved with ``hostbroker reassign execute`` from two brokers to one of
them and the third, a producer with acks=-1 going on all along. The move
finishes (the admin node goes, the assignment and state name the new replicas,
the old replica's directory is removed), nothing acknowledged is lost, and the
new replicas hold the same bytes below the high watermark."""

from __future__ import annotations

import json
import os

from tests.integration.cli import hostbroker
from tests.replication.support import (
    Feeder, Wire, assignment, fetch_all, poll, segment_bytes, state)

TOPIC = "moving"


def test_a_partition_moves_under_acks_all_and_the_move_finishes(cluster, zookeeper, zk,
                                                                    tmp_path):
    done = hostbroker("topics", "create", "--zookeeper", zookeeper.connect, "--topic", TOPIC,
                      "--partitions", "1", "--replication-factor", "2")
    assert done.returncode == 0, done.stderr.decode()
    poll(lambda: len(state(zk, TOPIC, 0)["isr"]) == 2, what="a full ISR")
    old = assignment(zk, TOPIC)[0]
    (newcomer,) = set(cluster) - set(old)
    gone, kept = old  # the preferred leader leaves: leadership must move too
    target = [newcomer, kept]
    feeder = Feeder(cluster, TOPIC, 1)
    try:
        poll(lambda: len(feeder.acked) >= 200, what="200 acknowledged before the move")
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": target}]}))
        done = hostbroker("reassign", "execute", "--zookeeper", zookeeper.connect,
                          "--reassignment-json-file", plan)
        assert done.returncode == 0, done.stderr.decode()
        poll(lambda: zk.exists("/admin/reassign_partitions") is None, timeout=60,
             what="the reassignment to finish")
        count = len(feeder.acked)
        poll(lambda: len(feeder.acked) >= count + 200, what="200 acknowledged after the move")
    finally:
        feeder.stop()
    assert assignment(zk, TOPIC)[0] == target
    s = state(zk, TOPIC, 0)
    assert s["leader"] in target and set(s["isr"]) <= set(target)
    done = hostbroker("reassign", "verify", "--zookeeper", zookeeper.connect,
                      "--reassignment-json-file", plan)
    assert (done.returncode, done.stdout.decode()) == (0, f"{TOPIC}-0: done\n")
    # the old replica's data is removed (STOP_REPLICA with delete)
    logs = cluster[gone].settings["log.dirs"]
    poll(lambda: not any(n.startswith(f"{TOPIC}_") for n in os.listdir(logs)),
         what="the old replica removed")
    wire = Wire(cluster[s["leader"]].unix_path)
    try:
        read = dict(fetch_all(wire, TOPIC, 0))
    finally:
        wire.close()
    lost = [(off, v) for _, off, v in feeder.acked if read.get(off) != v]
    assert not lost, f"{len(lost)} of {len(feeder.acked)} acknowledged messages lost"
    # the new replicas agree byte for byte once the follower has caught up
    poll(lambda: len(state(zk, TOPIC, 0)["isr"]) == 2, what="both new replicas in sync")
    poll(lambda: segment_bytes(cluster[newcomer], TOPIC, 0)
         == segment_bytes(cluster[kept], TOPIC, 0), what="equal replicas")
