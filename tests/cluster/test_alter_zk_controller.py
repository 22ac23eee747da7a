"""A replicated topic changed in ZooKeeper, as the controller and the registrars see it
(hostbroker/cluster/controller_topics.py, workers/registrar_names.py): the
controller's own class and the registrar's reader on a real ZooKeeper, the brokers
replaced by the notices the controller hands its senders.

- partitions added to a topic's node fire the controller's watch at once; the
  new partitions get states (the old ones untouched) and their replicas are told;
- a change node makes the controller read the topic's config again and tell every
  replica the whole config (a key removed: sent without it); one the writers
  cannot take is not sent;
- the registrar's reader sees the new partition count through the node's watch,
  without waiting for its 30 s full read;
- ``alter_cluster`` writes what Kafka 0.8.1 writes, refuses shrinking in one line.
"""

from __future__ import annotations

import io
import json
import os
import time
from types import SimpleNamespace

import pytest

from hostbroker.cluster import paths
from hostbroker.cluster.controller import LEADER_AND_ISR, Controller
from hostbroker.cluster.topic_changes import CONFIG_CHANGES, notify_config_change
from hostbroker.exits import EXIT_USAGE, CommandError
from hostbroker.commands.topics_alter_zk import alter_cluster
from hostbroker.cluster import replica_nodes
from hostbroker.shm.region import SharedRegion
from hostbroker.shm.topicnames import ReplicatedNames
from hostbroker.workers.registrar_controller import request_of
from hostbroker.workers.registrar_names import ReplicatedTopics
from tests.cluster.zkfixtures import Said, cluster, zkserver  # noqa: F401 - fixtures


def live(zk, *ids):
    for i in ids:
        info = paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)
        zk.create(paths.broker_path(i), paths.encode_broker(info), makepath=True)


def state(zk, topic, p):
    return json.loads(zk.get(replica_nodes.state_path(topic, p))[0])


def wait(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def started(zk, **kw):
    fired, told = [], []
    controller = Controller(zk, 1, told.append, on_topic_changed=fired.append, **kw)
    assert controller.try_elect()
    controller.rebuild()
    return controller, fired, told


def alter(connect, topic, partitions=None, set_configs=None, delete_configs=()):
    out, err = io.StringIO(), io.StringIO()
    assert alter_cluster(connect, topic, partitions, dict(set_configs or {}),
                         list(delete_configs), out, err) == 0, err.getvalue()
    return out.getvalue()


def test_partitions_added_are_started_at_once_and_the_old_ones_kept(cluster):
    connect, zk = cluster
    live(zk, 1, 2, 3)
    zk.create(replica_nodes.assignment_path("t"),
              replica_nodes.encode_assignment({0: [1, 2], 1: [2, 3]}),
              makepath=True)
    controller, fired, told = started(zk)
    before = {p: state(zk, "t", p) for p in (0, 1)}
    told.clear()

    said = alter(connect, "t", partitions=4)
    assert said.strip() == "altered topic t: partitions 2 -> 4"
    wait(lambda: fired == ["t"])  # the watch, not a poll
    assert controller.partitions_added(fired) == [("t", 2), ("t", 3)]
    assignment = replica_nodes.decode_assignment(
        zk.get(replica_nodes.assignment_path("t"))[0], "t")
    assert assignment[0] == (1, 2) and assignment[1] == (2, 3)  # untouched
    assert all(len(assignment[p]) == 2 for p in (2, 3))
    for p in (2, 3):
        s = state(zk, "t", p)
        assert s["leader"] == assignment[p][0] and s["isr"] == list(assignment[p])
        assert s["leader_epoch"] == 0
    assert {p: state(zk, "t", p) for p in (0, 1)} == before
    # each replica of a new partition is told of it (and of nothing else)
    by_broker = {n.broker_id: set(n.partitions) for n in told}
    for p in (2, 3):
        for b in assignment[p]:
            assert ("t", p) in by_broker[b]
    assert all(tp[1] >= 2 for tps in by_broker.values() for tp in tps)

    # the watch is set again by the read: a second growth fires it again
    fired.clear()
    alter(connect, "t", partitions=5)
    wait(lambda: fired == ["t"])
    assert controller.partitions_added(fired) == [("t", 4)]


def test_shrinking_and_bad_counts_are_refused_in_one_line(cluster):
    connect, zk = cluster
    live(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("t"),
              replica_nodes.encode_assignment({0: [1, 2], 1: [2, 1]}),
              makepath=True)
    for partitions, said in ((1, "partitions only grow"), (2, "already has 2 partitions"),
                             (20_000, "zookeeper.max.partitions.per.registration")):
        with pytest.raises(CommandError) as caught:
            alter_cluster(connect, "t", partitions, {}, [], io.StringIO(), io.StringIO())
        assert said in str(caught.value) and len(str(caught.value).splitlines()) == 1
    zk.create(f"{replica_nodes.DELETE_TOPICS}/t", b"", makepath=True)
    with pytest.raises(CommandError, match="marked for deletion"):
        alter_cluster(connect, "t", 3, {}, [], io.StringIO(), io.StringIO())
    assert len(json.loads(zk.get(replica_nodes.assignment_path("t"))[0])["partitions"]) == 2


def test_a_config_change_is_told_to_every_replica_whole(cluster):
    connect, zk = cluster
    live(zk, 1, 2, 3)
    zk.create(replica_nodes.topic_config_path("t"), replica_nodes.encode_topic_config(
        {"retention.ms": "60000"}), makepath=True)
    zk.create(replica_nodes.assignment_path("t"),
              replica_nodes.encode_assignment({0: [1, 2], 1: [2, 3]}),
              makepath=True)
    controller, _, told = started(zk)
    assert controller.configs["t"] == {"retention.ms": "60000"}
    told.clear()

    alter(connect, "t", set_configs={"retention.bytes": "4096", "unclean.leader.election.enable":
                                     "true"})
    assert json.loads(zk.get(replica_nodes.topic_config_path("t"))[0])["config"] == {
        "retention.ms": "60000", "retention.bytes": "4096",
        "unclean.leader.election.enable": "true"}
    (change,) = zk.get_children(CONFIG_CHANGES)
    assert change.startswith("config_change_")
    assert zk.get(f"{CONFIG_CHANGES}/{change}")[0] == b'"t"'
    assert controller.config_changes() == ["t"]
    assert {n.broker_id for n in told} == {1, 2, 3}
    for notice in told:
        assert notice.kind == LEADER_AND_ISR
        # the controller's own key stays with it
        assert notice.configs == {"t": {"retention.ms": "60000", "retention.bytes": "4096"}}
    assert controller.unclean is False and controller.configs["t"][
        "unclean.leader.election.enable"] == "true"
    assert controller.config_changes() == []  # seen once

    # every override removed: the replicas are sent an empty config, not nothing
    told.clear()
    alter(connect, "t", delete_configs=["retention.ms", "retention.bytes",
                                        "unclean.leader.election.enable"])
    assert controller.config_changes() == ["t"]
    assert {n.broker_id for n in told} == {1, 2, 3}
    for notice in told:
        assert notice.configs == {"t": {}}
        (entry,) = request_of(notice, 1).topic_configs
        assert entry.topic == "t" and tuple(entry.configs) == ()


def test_a_bad_config_is_refused_by_the_command_before_anything_is_written(cluster):
    connect, zk = cluster
    live(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment({0: [1, 2]}),
              makepath=True)
    for config, said in (({"retention.ms": "soon"}, "retention.ms"),
                         ({"no.such": "1"}, "no.such"),
                         ({"min.insync.replicas": "3"}, "replication factor")):
        with pytest.raises(CommandError) as caught:  # a usage error, one line
            alter_cluster(connect, "t", None, config, [], io.StringIO(), io.StringIO())
        assert caught.value.status == EXIT_USAGE
        assert said in str(caught.value) and len(str(caught.value).splitlines()) == 1
    assert zk.exists(replica_nodes.topic_config_path("t")) is None
    assert zk.exists(CONFIG_CHANGES) is None or zk.get_children(CONFIG_CHANGES) == []


def test_a_new_controller_removes_the_change_nodes_there_and_each_one_it_applies(cluster):
    _, zk = cluster
    live(zk, 1)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment({0: [1]}),
              makepath=True)
    notify_config_change(zk, "t")
    controller, _, told = started(zk)
    assert controller.config_changes() == []  # its rebuild read every config
    assert zk.get_children(CONFIG_CHANGES) == []
    notify_config_change(zk, "t")
    assert controller.config_changes() == ["t"]
    assert zk.get_children(CONFIG_CHANGES) == []  # applied: removed at once
    assert controller.config_seen == {}


def test_the_registrars_count_follows_an_added_partition_through_the_watch(cluster):
    _, zk = cluster
    zk.create(replica_nodes.assignment_path("t"),
              replica_nodes.encode_assignment({0: [1], 1: [1]}),
              makepath=True)
    region = SharedRegion.create(f"/hbtest-alterzk-{os.getpid()}", ReplicatedNames.region_size(8))
    names = ReplicatedNames.create(region, 8)
    try:
        rung = []
        worker = SimpleNamespace(client=zk, doorbell=SimpleNamespace(ring=lambda: rung.append(1)),
                                 connection_ms=5000, stopping=False)
        reader = ReplicatedTopics(worker, names)
        reader.read_and_publish(zk, full=True)
        assert names.partition_counts() == {"t": 2}
        data, stat = zk.get(replica_nodes.assignment_path("t"))
        zk.set(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment(
            {0: [1], 1: [1], 2: [1]}), version=stat.version)
        wait(lambda: reader.changed == {"t"} and rung)
        reader.read_and_publish(zk, full=False)  # only the changed node is read
        assert names.partition_counts() == {"t": 3}
        assert reader.changed == set()
    finally:
        names.close()
        region.close()
        region.unlink()


def test_changes_made_while_no_controller_runs_are_taken_at_the_next_take_over(cluster):
    connect, zk = cluster
    live(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment({0: [1, 2]}),
              makepath=True)
    first, _, _ = started(zk)
    alter(connect, "t", partitions=2, set_configs={"retention.ms": "5000"})
    # the controller's session ends before it acted: its successor's rebuild does it all
    zk.delete(replica_nodes.CONTROLLER)
    successor, _, told = started(zk)
    assert successor.epoch > first.epoch
    assert state(zk, "t", 1)["leader"] in (1, 2)
    assert {n.broker_id for n in told} == {1, 2}
    for notice in told:
        assert set(notice.partitions) == {("t", 0), ("t", 1)}
        assert notice.configs == {"t": {"retention.ms": "5000"}}
    assert successor.config_changes() == []  # the change node was taken as seen


def test_unclean_election_turned_on_for_a_topic_lets_its_offline_partition_lead(cluster):
    connect, zk = cluster
    live(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment({0: [3, 2]}),
              makepath=True)
    # broker 3 led and was alone in sync when it died: offline, broker 2 not in the ISR
    zk.create(replica_nodes.state_path("t", 0), replica_nodes.encode_state(
        replica_nodes.PartitionState(-1, 4, (3,), 1)), makepath=True)
    controller, _, told = started(zk)
    assert state(zk, "t", 0)["leader"] == -1
    alter(connect, "t", set_configs={"unclean.leader.election.enable": "true"})
    assert controller.config_changes() == ["t"]
    assert state(zk, "t", 0)["leader"] == 2 and state(zk, "t", 0)["isr"] == [2]
