"""A reassignment while a producer runs: real brokers on a real ZooKeeper, a
partition moved with ``hostbroker reassign execute`` from two brokers to one of
them and the third, a producer with acks=-1 going on all along. The move
finishes (the admin node goes, the assignment and state name the new replicas,
the old replica's directory is removed), nothing acknowledged is lost, and the
new replicas hold the same bytes below the high watermark. Then, the producer
still going, the replication factor grows from 2 to 3 by another
reassignment: the third replica starts from nothing, catches up and joins the
ISR, and all three hold the same bytes.

Auto-create is off on these brokers: a produce that reaches the old leader
after its copy is deleted would otherwise make a plain topic of the same name
there, unless the broker knows the name is a replicated topic's (the last
test here)."""

from __future__ import annotations

import json
import os

from hostbroker.cluster import replica_nodes
from tests.integration.cli import hostbroker
from tests.replication.support import (
    SETTINGS, Feeder, Wire, assignment, fetch_all, poll, segment_bytes, state)

TOPIC = "moving"


def _brokers(make_broker, tmp_path, zookeeper, zk, ids, **settings):
    brokers = {}
    for broker_id in ids:
        root = tmp_path / f"b{broker_id}"
        root.mkdir()
        brokers[broker_id] = make_broker(root=root, **{
            **SETTINGS, "zookeeper.connect": zookeeper.connect, "broker.id": broker_id,
            **settings})
    poll(lambda: sorted(zk.get_children("/brokers/ids")) == sorted(map(str, ids)),
         what="the brokers registered")
    poll(lambda: zk.exists("/controller") is not None, what="a controller")
    return brokers


def _moved_under_load(cluster, zookeeper, zk, plan, replicas, count) -> Feeder:
    """Partition 0 reassigned to ``replicas`` by ``reassign execute`` while an acks=-1
    producer goes on: ``count`` acknowledged before, the move finished, ``count`` more
    after. The producer is stopped; what it was told is in its ``acked``."""
    feeder = Feeder(cluster, TOPIC, 1)
    try:
        poll(lambda: len(feeder.acked) >= count, what=f"{count} acknowledged before the move")
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": replicas}]}))
        done = hostbroker("reassign", "execute", "--zookeeper", zookeeper.connect,
                          "--reassignment-json-file", plan)
        assert done.returncode == 0, done.stderr.decode()
        poll(lambda: zk.exists("/admin/reassign_partitions") is None, timeout=60,
             what="the move to finish")
        before = len(feeder.acked)
        poll(lambda: len(feeder.acked) >= before + count, timeout=10,
             what=f"{count} acknowledged after the move")
    finally:
        feeder.stop()
    return feeder


def _nothing_lost(leader, feeder: Feeder) -> None:
    """Every message the producer was told was acknowledged is in the leader's log."""
    wire = Wire(leader.unix_path)
    try:
        read = dict(fetch_all(wire, TOPIC, 0))
    finally:
        wire.close()
    lost = [(off, v) for _, off, v in feeder.acked if read.get(off) != v]
    assert not lost, f"{len(lost)} of {len(feeder.acked)} acknowledged messages lost"


def test_a_partition_moves_under_acks_all_and_the_move_finishes(make_broker, zookeeper, zk,
                                                                    tmp_path):
    cluster = _brokers(make_broker, tmp_path, zookeeper, zk, (1, 2, 3),
                       **{"auto.create.topics.enable": False})
    done = hostbroker("topics", "create", "--zookeeper", zookeeper.connect, "--topic", TOPIC,
                      "--partitions", "1", "--replication-factor", "2")
    assert done.returncode == 0, done.stderr.decode()
    poll(lambda: len(state(zk, TOPIC, 0)["isr"]) == 2, what="a full ISR")
    old = assignment(zk, TOPIC)[0]
    (newcomer,) = set(cluster) - set(old)
    gone, kept = old  # the preferred leader leaves: leadership must move too
    target = [newcomer, kept]
    plan = tmp_path / "plan.json"
    feeder = _moved_under_load(cluster, zookeeper, zk, plan, target, 200)
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
    _nothing_lost(cluster[s["leader"]], feeder)
    # the new replicas agree byte for byte once the follower has caught up
    poll(lambda: len(state(zk, TOPIC, 0)["isr"]) == 2, what="both new replicas in sync")
    poll(lambda: segment_bytes(cluster[newcomer], TOPIC, 0)
         == segment_bytes(cluster[kept], TOPIC, 0), what="equal replicas")

    # the replication factor grows to 3 while the producer goes on: the broker whose
    # copy was deleted above starts again from nothing and joins the ISR
    grown = target + [gone]
    feeder = _moved_under_load(cluster, zookeeper, zk, plan, grown, 100)
    assert assignment(zk, TOPIC)[0] == grown
    s = state(zk, TOPIC, 0)
    # the move finished with all three in the ISR; a follower slow under the load may
    # have left it since, and comes back once the producer has stopped
    assert s["leader"] in target and set(s["isr"]) <= set(grown)
    poll(lambda: sorted(state(zk, TOPIC, 0)["isr"]) == sorted(grown),
         what="all three replicas in sync")
    _nothing_lost(cluster[s["leader"]], feeder)
    poll(lambda: segment_bytes(cluster[gone], TOPIC, 0)
         == segment_bytes(cluster[s["leader"]], TOPIC, 0), what="the third replica equal")


def test_a_broker_without_a_replica_does_not_make_a_plain_topic_of_a_replicated_one(
        make_broker, zookeeper, zk, tmp_path):
    zk.create(replica_nodes.assignment_path("elsewhere"),
              replica_nodes.encode_assignment({0: [7]}),
              makepath=True)
    broker = _brokers(make_broker, tmp_path, zookeeper, zk, (1,))[1]
    wire = Wire(broker.unix_path)
    try:
        code, _ = wire.produce("elsewhere", 0, [b"lost"])
    finally:
        wire.close()
    assert code != 0
    assert "elsewhere_0" not in os.listdir(broker.settings["log.dirs"])
