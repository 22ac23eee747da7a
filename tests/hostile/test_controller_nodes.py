"""Standing cases: whoever can write to ZooKeeper, against the controller (issue 35).

The controller reads every replicated topic, state node, topic config and admin
request from ZooKeeper; the admin tools read JSON files a user hands them. A
node that does not decode is left out with one line and never stops the
controller: the good topics still get their leaders, a bad admin request is
removed, an impossible reassignment is dropped. A hostile file is one usage
line. Real ZooKeeper; the controller's own class on a kazoo client.
"""

from __future__ import annotations

import json

import pytest

from hostbroker.cluster import paths
from hostbroker.cluster.controller import Controller
from hostbroker.cluster import replica_nodes
from tests.cluster.zkfixtures import Said, chrooted, zkserver  # noqa: F401 - fixture
from tests.integration.cli import hostbroker, one_line_error


@pytest.fixture
def zk(zkserver, request):  # noqa: F811 - the imported fixture
    with chrooted(zkserver.connect, f"/{request.node.name[:40]}") as (connect, client):
        yield client


def live(zk, *ids):
    for i in ids:
        info = paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)
        zk.create(paths.broker_path(i), paths.encode_broker(info), makepath=True)


def state(zk, topic, p):
    return json.loads(zk.get(replica_nodes.state_path(topic, p))[0])


def test_hostile_replication_nodes_are_left_out_and_the_controller_goes_on(zk):
    live(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("good"), replica_nodes.encode_assignment({0: [1, 2]}),
              makepath=True)
    hostile = {
        replica_nodes.assignment_path("deep"): b"[" * 20_000 + b"]" * 20_000,
        replica_nodes.assignment_path("huge"): json.dumps(
            {"version": 1, "partitions": {str(p): [1] for p in range(20_000)}}).encode(),
        replica_nodes.assignment_path("nine"): json.dumps(
            {"version": 1, "partitions": {"0": list(range(9))}}).encode(),
        replica_nodes.assignment_path("twice"): b'{"version":1,"partitions":{"0":[1,1]}}',
        replica_nodes.assignment_path("binary"): b"\xff\xfe{",
        replica_nodes.topic_config_path("good"): b'{"version":1,"config":{"k":["not a string"]}}',
    }
    for path, value in hostile.items():
        zk.create(path, value, makepath=True)
    # a state node of a good topic, forged: a leader outside its ISR
    zk.create(replica_nodes.assignment_path("forged"),
              replica_nodes.encode_assignment({0: [1, 2]}),
              makepath=True)
    zk.create(replica_nodes.state_path("forged", 0),
              b'{"version":1,"leader":7,"leader_epoch":0,"isr":[1],"controller_epoch":0}',
              makepath=True)
    zk.create(replica_nodes.CONTROLLER_EPOCH, b"not a number", makepath=True)
    said = Said()
    told = []
    controller = Controller(zk, 1, told.append, report=said)
    assert controller.try_elect()
    assert controller.epoch == 1  # an unreadable epoch starts over, said once
    controller.rebuild()
    assert state(zk, "good", 0) == {"version": 1, "leader": 1, "leader_epoch": 0,
                                    "isr": [1, 2], "controller_epoch": 1}
    assert controller.configs["good"] is None  # the bad config is left out (not sent)
    # the forged state is left alone (not overwritten blindly), and said
    assert json.loads(zk.get(replica_nodes.state_path("forged", 0))[0])["leader"] == 7
    bad = {path for path, _ in said.lines}
    assert set(hostile) | {replica_nodes.state_path("forged", 0),
                           replica_nodes.CONTROLLER_EPOCH} <= bad
    assert sorted(controller.topics) == ["forged", "good"]
    assert {n.broker_id for n in told} == {1, 2}
    assert all(len(problem.splitlines()) == 1 and len(problem) < 400
               for _, problem in said.lines)

    # admin requests that do not decode are removed; a reassignment that cannot be
    # done is dropped; a shutdown request of a broker id that is none is removed
    zk.create(replica_nodes.PREFERRED_REPLICA_ELECTION, b'{"version":1,"partitions":"all"}',
              makepath=True)
    zk.create(replica_nodes.REASSIGN_PARTITIONS, replica_nodes.encode_reassignment(
        {("good", 5): [1, 2], ("nope", 0): [1, 2]}), makepath=True)
    zk.create(f"{replica_nodes.CONTROLLED_SHUTDOWN}/abc", b"", makepath=True)
    zk.create(f"{replica_nodes.DELETE_TOPICS}/not-a-topic", b"", makepath=True)
    assert controller.preferred_election() == []
    assert controller.reassign() == [("good", 5), ("nope", 0)]
    assert controller.controlled_shutdown() == []
    controller.delete_topics()
    for path in (replica_nodes.PREFERRED_REPLICA_ELECTION, replica_nodes.REASSIGN_PARTITIONS,
                 f"{replica_nodes.CONTROLLED_SHUTDOWN}/abc"):
        assert zk.exists(path) is None, path
    assert zk.get_children(replica_nodes.DELETE_TOPICS) == []
    good = json.loads(zk.get(replica_nodes.assignment_path("good"))[0])
    assert good["partitions"] == {"0": [1, 2]}
    assert state(zk, "good", 0)["leader"] == 1


def test_a_controller_whose_node_was_taken_does_not_act(zk):
    live(zk, 1, 2)
    first = Controller(zk, 1, lambda notice: None)
    assert first.try_elect()
    zk.delete(replica_nodes.CONTROLLER)
    zk.create(replica_nodes.CONTROLLER, replica_nodes.encode_controller(2))  # forged: no session's
    assert not first.still_controller()
    assert not Controller(zk, 1, lambda notice: None).try_elect()


def test_hostile_reassignment_files_are_one_usage_line(tmp_path):
    cases = {
        "deep.json": "[" * 50_000 + "]" * 50_000,
        "text.json": "partitions",
        "list.json": "[]",
        "types.json": '{"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}',
        "nine.json": json.dumps({"partitions": [
            {"topic": "t", "partition": 0, "replicas": list(range(9))}]}),
        "twice.json": json.dumps({"partitions": [
            {"topic": "t", "partition": 0, "replicas": [1]},
            {"topic": "t", "partition": 0, "replicas": [2]}]}),
        "slash.json": json.dumps({"partitions": [
            {"topic": "../t", "partition": 0, "replicas": [1]}]}),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        result = hostbroker("reassign", "execute", "--zookeeper", "127.0.0.1:1",
                            "--reassignment-json-file", path)
        line = one_line_error(result)
        assert result.returncode == 2, (name, line)
        assert line.startswith("hostbroker reassign execute: --reassignment-json-file: "), line
        assert len(line) < 600
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.write(b" " * (17 << 20))
    result = hostbroker("reassign", "verify", "--zookeeper", "127.0.0.1:1",
                        "--reassignment-json-file", big)
    assert one_line_error(result) == (
        f"hostbroker reassign verify: --reassignment-json-file: {big} is longer than "
        f"{16 << 20} bytes")


def test_a_registered_broker_answering_garbage_costs_the_controller_one_thread(tmp_path):
    """A ``/brokers/ids`` entry anyone may write points the controller's sender at a
    server of theirs: answers of any size or shape are refused (bounded read), the
    sender reconnects with backoff, and nothing else is held up."""
    import socket
    import threading
    import time

    from hostbroker.cluster.controller import LEADER_AND_ISR, Notice
    from hostbroker.cluster.replica_nodes import PartitionState
    from hostbroker.workers.registrar_controller import BrokerSender

    answers = [b"\x7f\xff\xff\xff", b"\x00\x00\x00\x08garbage!", b"\x00\x00\x00\x02",
               b"\x00\x00"]
    accepted = []
    server = socket.socket(socket.AF_UNIX)
    path = str(tmp_path / "evil.sock")
    server.bind(path)
    server.listen(8)
    server.settimeout(0.2)
    done = threading.Event()

    def serve():
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)
            try:
                conn.recv(65536)
                conn.sendall(answers[len(accepted) % len(answers)])
                if len(accepted) % 2:
                    conn.close()  # half of them hang up, the others leave it hanging
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    stale = []
    notice = Notice(LEADER_AND_ISR, 7, 3, partitions={
        ("t", 0): (PartitionState(7, 0, (7,), 3), 0, [7])})
    sender = BrokerSender(paths.BrokerInfo(7, None, None, path), 1, 0.5,
                          lambda: stale.append(1), lambda broker_id: None).start()
    try:
        sender.put(notice)
        deadline = time.monotonic() + 6
        while len(accepted) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(accepted) >= 4  # tried again, each time on a new connection
        assert sender.sent == 0 and not stale and sender.thread.is_alive()
        for _ in range(200):  # a full queue is emptied (the controller resends all)
            sender.put(notice)
        assert sender.queue.qsize() <= 64
    finally:
        sender.stop()
        done.set()
        sender.thread.join(5)
        thread.join(5)
        server.close()
        for conn in accepted:
            conn.close()
    assert not sender.thread.is_alive()
