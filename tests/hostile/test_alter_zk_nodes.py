"""Standing cases: whoever can write to ZooKeeper, against a topic changed in place
(issue 37, ``topics alter --zookeeper``).

The controller reads ``/config/changes`` and each replicated topic's node again
when they change (hostbroker/cluster/controller_topics.py). What it reads is
hostile: a change node that is not a topic's name, a config the writers cannot
take, an assignment that lost partitions or names too many replicas, a flood of
change nodes. Each is left out with one line; the controller goes on with the
rest, never shrinks a topic, and never sends a config it could not read (the
replicas keep theirs rather than lose every override). A flood of change nodes
costs bounded looks, each reading the newest and removing what it read, so a
real change is never queued behind it. Real ZooKeeper; the
controller's own class on a kazoo client.
"""

from __future__ import annotations

import json

from hostbroker.cluster import paths, zkread
from hostbroker.cluster.controller import Controller
from hostbroker.cluster.topic_changes import CONFIG_CHANGES, notify_config_change
from hostbroker.cluster import replica_nodes
from hostbroker.workers.registrar_controller import request_of
from tests.cluster.zkfixtures import Said, cluster, zkserver  # noqa: F401 - fixtures


def live(zk, *ids):
    for i in ids:
        info = paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)
        zk.create(paths.broker_path(i), paths.encode_broker(info), makepath=True)


def one_liners(said: Said) -> bool:
    return all(len(problem.splitlines()) == 1 and len(problem) < 400
               for _, problem in said.lines)


def started(zk, **kw):
    said, told, fired = Said(), [], []
    controller = Controller(zk, 1, told.append, report=said, on_topic_changed=fired.append,
                            **kw)
    assert controller.try_elect()
    controller.rebuild()
    told.clear()
    return controller, said, told


def test_hostile_change_nodes_are_left_out_and_a_good_one_still_acts(cluster):
    _, zk = cluster
    live(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment({0: [1, 2]}),
              makepath=True)
    controller, said, told = started(zk)
    prefix = f"{CONFIG_CHANGES}/config_change_"
    for value in (b"\xff\xfe", b"[" * 50_000 + b"]" * 50_000, b'{"topic":"t"}', b'"a/b"',
                  b'"' + b"x" * 300 + b'"', b"t", b'"' + b"y" * 300_000 + b'"', b""):
        zk.create(prefix, value, sequence=True, makepath=True)
    zk.create(f"{CONFIG_CHANGES}/not-a-sequence-name", b'"nope"')  # a topic that is none
    zk.create(replica_nodes.topic_config_path("t"),
              replica_nodes.encode_topic_config({"flush.ms": "5"}),
              makepath=True)
    notify_config_change(zk, "t")
    assert controller.config_changes() == ["t"]
    assert controller.configs["t"] == {"flush.ms": "5"}
    assert {n.broker_id for n in told} == {1, 2}
    assert len(said.lines) >= 7 and one_liners(said)
    # seen once: a second look reads nothing again and says nothing again
    lines = len(said.lines)
    assert controller.config_changes() == []
    assert len(said.lines) == lines


def test_a_config_the_writers_cannot_take_is_not_sent_and_the_last_good_one_stands(cluster):
    _, zk = cluster
    live(zk, 1, 2)
    zk.create(replica_nodes.topic_config_path("t"), replica_nodes.encode_topic_config(
        {"retention.ms": "1000"}), makepath=True)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment({0: [1, 2]}),
              makepath=True)
    controller, said, told = started(zk)
    for bad in (b"not json", b'{"version":1,"config":{"retention.ms":["x"]}}',
                replica_nodes.encode_topic_config({"retention.ms": "soon"}),
                replica_nodes.encode_topic_config({"min.insync.replicas": "3"}),  # RF is 2
                replica_nodes.encode_topic_config({"unknown.key": "1"})):
        zk.set(replica_nodes.topic_config_path("t"), bad)
        notify_config_change(zk, "t")
        assert controller.config_changes() == []
        assert controller.configs["t"] == {"retention.ms": "1000"}
        assert told == []
    assert len(said.lines) == 5 and one_liners(said)
    # a controller that takes over with such a node there sends no config for the
    # topic at all (the replicas keep theirs), not an empty one (they would lose them)
    successor, _, told = started(zk)
    assert successor.configs["t"] is None
    successor.resend(1)
    (notice,) = told
    assert ("t", 0) in notice.partitions and "t" not in notice.configs
    assert request_of(notice, 1).topic_configs == ()


def test_an_assignment_that_loses_partitions_or_turns_bad_changes_nothing(cluster):
    _, zk = cluster
    live(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment(
        {0: [1, 2], 1: [2, 1], 2: [1, 2]}), makepath=True)
    controller, said, told = started(zk)
    path = replica_nodes.assignment_path("t")
    for value in (replica_nodes.encode_assignment({0: [1, 2]}),  # shrunk
                  json.dumps({"version": 1, "partitions": {
                      **{str(p): [1, 2] for p in range(3)}, "3": list(range(9))}}).encode(),
                  json.dumps({"version": 1, "partitions": {
                      str(p): [1] for p in range(20_000)}}).encode(),
                  b"[" * 10_000, b""):
        zk.set(path, value)
        assert controller.partitions_added(["t"]) == []
        assert sorted(controller.topics["t"]) == [0, 1, 2]
    assert told == []
    assert one_liners(said)
    assert {p for p, _ in said.lines} == {path}
    # a good growth after all that is taken
    zk.set(path, replica_nodes.encode_assignment({0: [1, 2], 1: [2, 1], 2: [1, 2], 3: [2, 1]}))
    assert controller.partitions_added(["t"]) == [("t", 3)]


def test_change_nodes_past_the_children_bound_cost_bounded_work(cluster):
    _, zk = cluster
    live(zk, 1)
    zk.create(replica_nodes.assignment_path("t"), replica_nodes.encode_assignment({0: [1]}),
              makepath=True)
    zk.create(replica_nodes.topic_config_path("t"),
              replica_nodes.encode_topic_config({"flush.ms": "5"}),
              makepath=True)
    bounds = zkread.Bounds.of({"zookeeper.max.children": 5})
    controller, said, told = started(zk, bounds=bounds)
    # a flood of change nodes before a real change: the real one (the newest) is read
    # at the first look, not after the flood has been worked through
    for _ in range(12):
        notify_config_change(zk, "nowhere")
    notify_config_change(zk, "t")
    assert controller.config_changes() == ["t"]
    assert len(told) == 1 and controller.configs["t"] == {"flush.ms": "5"}
    assert any("zookeeper.max.children" in problem for _, problem in said.lines)
    # the five read are removed at once, the older ones are read (five a look) and
    # removed at the next looks; nothing is held in memory for them
    assert len(zk.get_children(CONFIG_CHANGES)) == 8
    assert controller.config_changes() == [] and len(zk.get_children(CONFIG_CHANGES)) == 3
    assert controller.config_changes() == [] and zk.get_children(CONFIG_CHANGES) == []
    assert controller.config_seen == {} and len(told) == 1
    assert one_liners(said)
    # many changes of one topic in one look: one notice for the topic, not one a node
    for _ in range(4):
        notify_config_change(zk, "t")
    assert controller.config_changes() == ["t"] and len(told) == 2


def test_a_change_naming_a_topic_that_is_not_replicated_is_ignored(cluster):
    _, zk = cluster
    live(zk, 1)
    zk.create(paths.topic_path("plain"), b"", makepath=True)  # a 0.7-style topic
    zk.create(replica_nodes.topic_config_path("plain"), replica_nodes.encode_topic_config(
        {"retention.ms": "1"}), makepath=True)
    controller, said, told = started(zk)
    notify_config_change(zk, "plain")
    notify_config_change(zk, "nowhere")
    assert controller.config_changes() == []
    assert told == [] and "plain" not in controller.configs
