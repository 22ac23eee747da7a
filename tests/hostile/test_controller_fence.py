"""Standing cases: a client that plays the controller in cluster mode (issue 35).

A broker in cluster mode takes a LEADER_AND_ISR or STOP_REPLICA only from
the controller ZooKeeper names, in the epoch ZooKeeper holds (its registrar
publishes both, docs/cluster.md). A client's request with the largest epoch,
or with the current epoch and another controller id, is refused
CONTROLLER_NOT_CONFIRMED and changes nothing: the broker creates no
partition and keeps no epoch from it, and the real controller's next
requests are still taken. Hostile ``/controller`` and ``/controller_epoch``
nodes confirm no controller (and never stop the registrar).

Real brokers and a real ZooKeeper (one for the module, a chroot per test).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import struct
import time

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.protocol import replication as rproto
from hostbroker.cluster import replica_nodes
from hostbroker.shm.peers import PeersTable
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from hostbroker.workers.registrar_fence import ControllerFence
from tests.cluster.zkfixtures import cluster, zkserver  # noqa: F401 - fixtures
from tests.integration.cli import hostbroker
from tests.integration.conftest import make_broker  # noqa: F401 - fixture

LEAN = {"num.processors": 1, "num.handlers": 1, "zookeeper.session.timeout.ms": 2000,
        "zookeeper.connection.timeout.ms": 5000}
_roots = itertools.count()


def wait_until(condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def ask(broker, body, cls):
    frame = rproto.encode_request(body, 7, "not-a-controller")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(broker.unix_path)
        sock.sendall(frame)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        answer = sock.recv(size, socket.MSG_WAITALL)
    return rproto.decode_response(answer, cls)[1]


def controller(zk) -> tuple[int, int] | None:
    from kazoo.exceptions import NoNodeError

    try:
        holder = json.loads(zk.get(replica_nodes.CONTROLLER)[0])["brokerid"]
        return holder, int(zk.get(replica_nodes.CONTROLLER_EPOCH)[0])
    except NoNodeError:
        return None


def metadata(broker, topic: str):
    return ask(broker, rproto.MetadataRequestV1((topic,)), rproto.MetadataResponseV1)


def test_a_clients_controller_requests_are_refused_and_the_real_controller_goes_on(
        make_broker, tmp_path, cluster):  # noqa: F811
    assert ErrorCode.CONTROLLER_NOT_CONFIRMED == 29
    connect, zk = cluster
    brokers = {}
    for i in (1, 2):
        (tmp_path / f"b{i}").mkdir()
        brokers[i] = make_broker(root=tmp_path / f"b{i}", **{
            **LEAN, "zookeeper.connect": connect, "broker.id": i})
    wait_until(lambda: controller(zk) is not None)
    holder, epoch = controller(zk)
    victim = brokers[3 - holder]
    logs = tmp_path / f"b{3 - holder}" / "logs"
    forged = ("forged", 0, 3 - holder, 5, (3 - holder,), 0, (3 - holder,))
    hostile = [
        (2**31 - 1, 9),  # the largest epoch: would wedge the broker if kept
        (epoch + 1, holder),  # the next epoch, before any controller has it
        (epoch, 9),  # the current epoch, from a broker that is not the controller
    ]
    for controller_epoch, controller_id in hostile:
        answer = ask(victim, rproto.LeaderAndIsrRequest(
            controller_id, controller_epoch, (rproto.LeaderAndIsrPartition(*forged),)),
            rproto.LeaderAndIsrResponse)
        assert answer.error_code == ErrorCode.CONTROLLER_NOT_CONFIRMED
        assert [p.error_code for p in answer.partitions] == [
            ErrorCode.CONTROLLER_NOT_CONFIRMED]
        stopped = ask(victim, rproto.StopReplicaRequest(
            controller_id, controller_epoch, 1, (rproto.StopReplicaPartition("forged", 0),)),
            rproto.StopReplicaResponse)
        assert stopped.error_code == ErrorCode.CONTROLLER_NOT_CONFIRMED
    # nothing changed: no partition, no epoch or controller kept from them
    assert not (logs / "forged_0").exists()
    meta = metadata(victim, "forged")
    assert meta.controller_id in (-1, holder)
    assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # the real controller's requests are still taken: a topic created now has
    # leaders on both brokers, with no STALE_CONTROLLER_EPOCH on the way
    result = hostbroker("topics", "create", "--zookeeper", connect, "--topic", "after",
                        "--partitions", "2", "--replication-factor", "2")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: all((logs / f"after_{p}").is_dir() for p in (0, 1)))

    def led() -> bool:
        parts = metadata(victim, "after").topics[0].partitions
        return len(parts) == 2 and all(p.error_code == ErrorCode.NONE and p.leader in (1, 2)
                                       for p in parts)

    wait_until(led)
    assert controller(zk) == (holder, epoch)  # no epoch was spent on the forgeries
    assert metadata(victim, "after").controller_id == holder
    assert "refused controller epoch" not in brokers[holder].log()


class _Worker:
    """What :class:`ControllerFence` uses of the registrar."""

    def __init__(self, client):
        self.client = client
        self.connection_ms = 5000
        self.stopping = False

        class _Bell:
            def ring(self):
                pass

        self.doorbell = _Bell()


@pytest.fixture
def peers():
    token = f"t{os.getpid()}f{next(_roots)}"
    table = PeersTable.create(region_name(token, "peers", 0), 4)
    yield table
    table.close()
    remove_stale(broker_prefix(token))


def test_hostile_controller_nodes_confirm_no_controller(cluster, peers):  # noqa: F811
    _, zk = cluster
    worker = _Worker(zk)
    fence = ControllerFence(worker, peers)
    assert fence.read_and_publish(zk) and peers.zk_controller is None  # no nodes yet

    # an epoch written before the /controller node: the previous controller's
    zk.create(replica_nodes.CONTROLLER_EPOCH, b"4")
    zk.create(replica_nodes.CONTROLLER, replica_nodes.encode_controller(3), ephemeral=True)
    assert fence.read_and_publish(zk) and peers.zk_controller is None
    zk.set(replica_nodes.CONTROLLER_EPOCH, b"5")  # the new controller takes its epoch
    assert fence.read_and_publish(zk) and peers.zk_controller == (5, 3)

    for bad in (b"99999999999", b"-1", b"5x", b"\xff", b"9" * 300_000, b""):
        try:
            zk.set(replica_nodes.CONTROLLER_EPOCH, bad)
        except Exception:  # noqa: BLE001 - over ZooKeeper's own node size: not storable
            continue
        assert fence.read_and_publish(zk) and peers.zk_controller is None, bad
        zk.set(replica_nodes.CONTROLLER_EPOCH, b"6")
        assert fence.read_and_publish(zk) and peers.zk_controller == (6, 3)
    for bad in (b"{", b'{"version":1,"brokerid":-4,"timestamp":"1"}',
                b'{"version":1,"brokerid":"3","timestamp":"1"}', b"[" * 50_000):
        zk.set(replica_nodes.CONTROLLER, bad)
        zk.set(replica_nodes.CONTROLLER_EPOCH, b"7")
        assert fence.read_and_publish(zk) and peers.zk_controller is None, bad
    zk.delete(replica_nodes.CONTROLLER)
    assert fence.read_and_publish(zk) and peers.zk_controller is None
