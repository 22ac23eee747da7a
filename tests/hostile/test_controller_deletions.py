"""Standing cases: a hostile ``/admin/delete_topics`` and ``/controller_epoch``
(issue 35).

- Hundreds of children under ``/admin/delete_topics`` (names of no topic, or
  of real ones) cost the controller bounded work per look: at most
  ``controller.deletions.per.pass`` deletions start in one pass, the rest in
  later ones, and a real deletion among them still finishes.
- Many real topics deleted at once are one STOP_REPLICA per broker, not one per
  topic (which would overflow a broker's sender queue, over and over).
- A ``/controller_epoch`` that is garbage, or missing, does not send the next
  controller back to epoch 1 (which every broker that saw a later one refuses):
  it takes an epoch above every partition state's ``controller_epoch``.

Real ZooKeeper; the controller's own class on a kazoo client.
"""

from __future__ import annotations

import pytest

from hostbroker.cluster import paths
from hostbroker.cluster.controller import STOP_REPLICA, Controller
from hostbroker.cluster import replica_nodes
from tests.cluster.zkfixtures import Said, chrooted, zkserver  # noqa: F401 - fixture


@pytest.fixture
def zk(zkserver, request):  # noqa: F811 - the imported fixture
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)[-60:]
    with chrooted(zkserver.connect, f"/{name}") as (connect, client):
        yield client


class _Counting:
    """A kazoo client counting its reads (get_async)."""

    def __init__(self, client):
        self.client, self.reads = client, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def get_async(self, path, *args, **kwargs):
        self.reads += 1
        return self.client.get_async(path, *args, **kwargs)


def _broker(zk, broker_id: int) -> None:
    zk.create(paths.broker_path(broker_id), paths.encode_broker(
        paths.BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id, None)), makepath=True)


def test_many_deletion_requests_cost_bounded_work_per_pass(zk):
    _broker(zk, 1)
    zk.create(replica_nodes.assignment_path("real"), replica_nodes.encode_assignment({0: [1]}),
              makepath=True)
    zk.ensure_path(replica_nodes.DELETE_TOPICS)
    transaction = zk.transaction()
    for i in range(400):
        transaction.create(replica_nodes.delete_topic_path(f"nope{i:04d}"), b"")
    assert not any(isinstance(r, Exception) for r in transaction.commit())
    zk.create(replica_nodes.delete_topic_path("real"), b"")
    counting, told = _Counting(zk), []
    c = Controller(counting, 1, told.append, deletes_per_pass=100)
    assert c.try_elect()
    c.rebuild()  # the rebuild's own pass: 100 requests looked at
    for _ in range(3):
        before = counting.reads
        c.delete_topics()
        assert counting.reads - before <= 100
    assert zk.get_children(replica_nodes.DELETE_TOPICS) == ["real"]
    c.delete_topics()  # "real" (sorted last): its replica told to delete it
    (stop,) = [n for n in told if n.kind == STOP_REPLICA]
    assert stop.stop == [("real", 0)] and stop.delete
    c.replicas_deleted(stop)
    assert zk.get_children(replica_nodes.DELETE_TOPICS) == []
    assert zk.exists(replica_nodes.assignment_path("real")) is None


def test_a_reassignment_whose_old_and_new_replicas_are_over_8_is_dropped(zk):
    """Written by hand (the tool refuses it): all of them would be sent in one
    LEADER_AND_ISR, which no request can carry, wedging that broker's sender."""
    for i in range(1, 11):
        _broker(zk, i)
    zk.create(replica_nodes.assignment_path("m"), replica_nodes.encode_assignment({0: [1, 2]}),
              makepath=True)
    said, told = Said(), []
    c = Controller(zk, 1, told.append, report=said)
    assert c.try_elect()
    c.rebuild()
    zk.create(replica_nodes.REASSIGN_PARTITIONS,
              replica_nodes.encode_reassignment({("m", 0): list(range(3, 11))}), makepath=True)
    told.clear()
    assert c.reassign() == [("m", 0)]
    assert told == []
    assert zk.exists(replica_nodes.REASSIGN_PARTITIONS) is None
    assert any("over the most a partition may have (8)" in line for _, line in said.lines)
    assert replica_nodes.decode_assignment(zk.get(replica_nodes.assignment_path("m"))[0], "m") == {
        0: (1, 2)}


@pytest.mark.parametrize("epoch_node", [b"garbage", b"-5", None])
def test_a_damaged_controller_epoch_does_not_send_the_epoch_back(zk, epoch_node):
    _broker(zk, 1)
    zk.create(replica_nodes.assignment_path("t"),
              replica_nodes.encode_assignment({0: [1], 1: [1]}),
              makepath=True)
    zk.create(replica_nodes.state_path("t", 0), replica_nodes.encode_state(
        replica_nodes.PartitionState(1, 3, (1,), 41)), makepath=True)
    zk.create(replica_nodes.state_path("t", 1), replica_nodes.encode_state(
        replica_nodes.PartitionState(1, 0, (1,), 17)), makepath=True)
    if epoch_node is not None:
        zk.create(replica_nodes.CONTROLLER_EPOCH, epoch_node, makepath=True)
    said = Said()
    c = Controller(zk, 1, lambda notice: None, report=said)
    assert c.try_elect()
    c.rebuild()
    assert c.epoch == 42
    assert zk.get(replica_nodes.CONTROLLER_EPOCH)[0] == b"42"
    assert any(path == replica_nodes.CONTROLLER_EPOCH for path, _ in said.lines)


def test_many_topics_deleted_at_once_are_one_request_per_broker(zk):
    """Each broker is told of every deletion begun in a pass in one STOP_REPLICA
    (a request per topic would overflow its sender's queue of 64, and every
    overflow sends it everything again); so is a broker back from being down."""
    for i in (1, 2):
        _broker(zk, i)
    topics = [f"gone{i:03d}" for i in range(80)]
    for topic in topics:
        zk.create(replica_nodes.assignment_path(topic),
                  replica_nodes.encode_assignment({0: [1, 3], 1: [2, 3]}),
                  makepath=True)
    told = []
    c = Controller(zk, 1, told.append)
    assert c.try_elect()
    c.rebuild()
    for topic in topics:
        zk.create(replica_nodes.delete_topic_path(topic), b"", makepath=True)
    told.clear()
    c.delete_topics()
    stops = [n for n in told if n.kind == STOP_REPLICA]
    assert sorted(n.broker_id for n in stops) == [1, 2]
    for n in stops:
        assert n.delete and sorted(n.stop) == [(t, n.broker_id - 1) for t in topics]
        c.replicas_deleted(n)
    assert len(zk.get_children(replica_nodes.DELETE_TOPICS)) == 80  # broker 3 has not answered
    told.clear()
    _broker(zk, 3)
    c.brokers_changed()
    (back,) = [n for n in told if n.kind == STOP_REPLICA]
    assert back.broker_id == 3 and len(back.stop) == 160
    c.replicas_deleted(back)
    assert zk.get_children(replica_nodes.DELETE_TOPICS) == []
