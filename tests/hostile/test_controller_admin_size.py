"""Standing cases: admin requests too long to read (issue 35).

``/admin/preferred_replica_election`` and ``/admin/reassign_partitions`` are
one at a time: while one exists the tools refuse to start another. A value
over ``zookeeper.max.node.bytes`` is one the controller never reads, so it
must be removed (with one line), not left in place to block every later
election or reassignment; and the tools never write one. Real ZooKeeper; the
controller's own class on a kazoo client; the tools as a user runs them.
"""

from __future__ import annotations

import json

import pytest

from hostbroker.cluster import paths, zkread
from hostbroker.cluster.controller import Controller
from hostbroker.cluster import replica_nodes
from tests.cluster.zkfixtures import Said, chrooted, zkserver  # noqa: F401 - fixture
from tests.integration.cli import hostbroker, one_line_error


@pytest.fixture
def zk(zkserver, request):  # noqa: F811 - the imported fixture
    with chrooted(zkserver.connect, f"/{request.node.name[:40]}") as (connect, client):
        yield client, connect


def _topic(zk, name: str, partitions: int) -> None:
    zk.create(replica_nodes.assignment_path(name),
              replica_nodes.encode_assignment({p: [1] for p in range(partitions)}), makepath=True)


def test_the_controller_removes_admin_requests_too_long_to_read(zk):
    zk, _ = zk
    info = paths.BrokerInfo(1, "127.0.0.1", 9001, None)
    zk.create(paths.broker_path(1), paths.encode_broker(info), makepath=True)
    _topic(zk, "t", 1)
    said = Said()
    controller = Controller(zk, 1, lambda notice: None, report=said)
    assert controller.try_elect()
    controller.rebuild()
    padding = [{"topic": "t", "partition": 0, "pad": "x" * 1000}] * 300
    too_long = json.dumps({"version": 1, "partitions": padding}).encode()
    assert len(too_long) > zkread.DEFAULT.node_bytes
    zk.create(replica_nodes.PREFERRED_REPLICA_ELECTION, too_long, makepath=True)
    zk.create(replica_nodes.REASSIGN_PARTITIONS, too_long, makepath=True)
    assert controller.preferred_election() == []
    assert controller.reassign() == []
    for path in (replica_nodes.PREFERRED_REPLICA_ELECTION, replica_nodes.REASSIGN_PARTITIONS):
        assert zk.exists(path) is None, path
        assert any(p == path and "zookeeper.max.node.bytes" in line for p, line in said.lines)


def test_the_tools_do_not_write_a_request_the_controller_cannot_read(zk, tmp_path):
    zk, connect = zk
    zk.create(paths.broker_path(1), paths.encode_broker(
        paths.BrokerInfo(1, "127.0.0.1", 9001, None)), makepath=True)
    name = "t" * 200
    _topic(zk, name, 2000)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": name, "partition": p, "replicas": [1]} for p in range(2000)]}))
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", str(plan))
    line = one_line_error(result)
    assert line.startswith("hostbroker reassign execute: ") and "bytes" in line, line
    assert zk.exists(replica_nodes.REASSIGN_PARTITIONS) is None
    # every partition led by no one: each of them would be in the election
    result = hostbroker("leaders", "elect", "--zookeeper", connect)
    line = one_line_error(result)
    assert line.startswith("hostbroker leaders elect: ") and "--topic" in line, line
    assert zk.exists(replica_nodes.PREFERRED_REPLICA_ELECTION) is None


def test_a_zookeeper_refusal_is_one_line_not_a_traceback(zk, tmp_path):
    """``/admin`` made read-only by whoever owns ZooKeeper: the tools that write
    under it say so in one line, status 1."""
    from kazoo.security import make_acl

    zk, connect = zk
    _topic(zk, "t", 1)
    zk.create(replica_nodes.ADMIN, b"", acl=[make_acl("world", "anyone", read=True)])
    result = hostbroker("leaders", "elect", "--zookeeper", connect)
    assert one_line_error(result) == (
        f"hostbroker leaders elect: ZooKeeper at {connect}: NoAuthError")
    assert result.returncode == 1
    result = hostbroker("topics", "delete", "--zookeeper", connect, "--topic", "t")
    assert one_line_error(result).endswith(": NoAuthError")


def test_a_topic_name_that_is_no_zookeeper_path_is_not_a_traceback(zk, tmp_path):
    """``..`` is printable and has no slash, but is no node name: the replicated
    side of the tools takes it for a topic that is not replicated."""
    zk, connect = zk
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"..","partition":0,"replicas":[1]}]}')
    result = hostbroker("reassign", "verify", "--zookeeper", connect,
                        "--reassignment-json-file", str(plan))
    assert one_line_error(result) == "hostbroker reassign verify: no replicated topic .."
    result = hostbroker("topics", "delete", "--zookeeper", connect, "--topic", "..")
    assert "Traceback" not in result.stderr.decode() and result.returncode != 0
