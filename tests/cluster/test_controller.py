"""The controller, for real: ``hostbroker serve`` brokers in cluster mode on a real
ZooKeeper electing one controller, a new one after a SIGKILL (epoch bumped), state
nodes for new replicated topics, leaders moved off a broker that dies, and the tools
(``topics create|describe|delete``, ``leaders elect``, ``reassign``) on ZooKeeper.

One ZooKeeper serves the module; each test has its own chroot in it."""

from __future__ import annotations

import json
import time

import pytest

from hostbroker.cluster import replica_nodes
from tests.cluster.test_broker_registration import kill_hard
from tests.cluster.test_discovery import wait_until
from tests.cluster.zkfixtures import cluster, zkserver  # noqa: F401 - fixtures
from tests.integration.cli import hostbroker, lines, one_line_error

SESSION_MS = 2000
LEAN = {"num.processors": 1, "num.handlers": 1, "zookeeper.session.timeout.ms": SESSION_MS,
        "zookeeper.connection.timeout.ms": 5000}


def start(make_broker, tmp_path, connect, zk, broker_id, **settings):
    root = tmp_path / f"b{broker_id}"
    root.mkdir(exist_ok=True)
    broker = make_broker(root=root, **{**LEAN, "zookeeper.connect": connect,
                                       "broker.id": broker_id, **settings})
    wait_until(lambda: zk.exists(f"/brokers/ids/{broker_id}") is not None)
    return broker


def three_brokers(make_broker, tmp_path, connect, zk) -> dict:
    """Brokers 1, 2 and 3 started, once one of them is the controller."""
    brokers = {i: start(make_broker, tmp_path, connect, zk, i) for i in (1, 2, 3)}
    wait_until(lambda: controller(zk) is not None)
    return brokers


def controller(zk) -> tuple[int, int] | None:
    """(broker id in /controller, /controller_epoch), or None while there is none (or
    the epoch is not a number)."""
    from kazoo.exceptions import NoNodeError

    try:
        holder = json.loads(zk.get(replica_nodes.CONTROLLER)[0])["brokerid"]
        return holder, int(zk.get(replica_nodes.CONTROLLER_EPOCH)[0])
    except (NoNodeError, ValueError):
        return None


def state(zk, topic, p) -> dict | None:
    from kazoo.exceptions import NoNodeError

    try:
        return json.loads(zk.get(replica_nodes.state_path(topic, p))[0])
    except NoNodeError:
        return None


def create(connect, topic, partitions, factor, *more):
    return hostbroker("topics", "create", "--zookeeper", connect, "--topic", topic,
                      "--partitions", str(partitions), "--replication-factor", str(factor),
                      *more)


def test_one_controller_new_topics_get_states_and_leaders_move_off_a_killed_broker(
        make_broker, tmp_path, cluster):  # noqa: F811
    connect, zk = cluster
    brokers = three_brokers(make_broker, tmp_path, connect, zk)
    holder, epoch = controller(zk)
    assert holder in brokers and epoch >= 1

    result = create(connect, "three", 3, 3, "--config", "min.insync.replicas=2")
    assert result.returncode == 0, result.stderr
    assert lines(result) == [
        "created topic three with 3 partitions, replication factor 3 min.insync.replicas=2"]
    result = create(connect, "two", 4, 2)
    assert result.returncode == 0, result.stderr
    assignment = json.loads(zk.get(replica_nodes.assignment_path("two"))[0])["partitions"]
    assert sorted(assignment) == ["0", "1", "2", "3"]
    assert all(len(set(r)) == 2 and set(r) <= {1, 2, 3} for r in assignment.values())
    # the round robin spreads the preferred leaders over every broker
    assert {r[0] for r in assignment.values()} == {1, 2, 3}
    assert json.loads(zk.get(replica_nodes.topic_config_path("three"))[0])["config"] == {
        "min.insync.replicas": "2"}

    for topic, count in (("three", 3), ("two", 4)):
        replicas = json.loads(zk.get(replica_nodes.assignment_path(topic))[0])["partitions"]
        for p in range(count):
            wait_until(lambda: state(zk, topic, p) is not None)
            s = state(zk, topic, p)
            assert (s["leader"], s["leader_epoch"], s["isr"], s["controller_epoch"]) == (
                replicas[str(p)][0], 0, replicas[str(p)], epoch)

    result = hostbroker("topics", "describe", "--zookeeper", connect, "--json", "two")
    assert result.returncode == 0, result.stderr
    (topic,) = json.loads(result.stdout)["topics"]
    assert topic["topic"] == "two" and topic["replication_factor"] == 2
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"])
            for p in topic["partitions"]] == [
        (p, assignment[str(p)][0], assignment[str(p)], assignment[str(p)]) for p in range(4)]

    # a broker that is not the controller dies: its leaderships move, ISRs shrink
    victim = next(i for i in brokers if i != holder)
    kill_hard(brokers[victim])
    brokers[victim].kill_tree()
    replicas = json.loads(zk.get(replica_nodes.assignment_path("three"))[0])["partitions"]

    def moved() -> bool:
        return all(victim not in state(zk, "three", p)["isr"] for p in range(3))

    wait_until(moved, timeout=SESSION_MS / 1000 + 8)
    for p in range(3):
        s = state(zk, "three", p)
        was_leader = replicas[str(p)][0] == victim
        assert s["leader"] != victim and s["leader"] in replicas[str(p)]
        assert s["leader_epoch"] == (1 if was_leader else 0)
        assert s["isr"] == [b for b in replicas[str(p)] if b != victim]

    result = hostbroker("topics", "describe", "--zookeeper", connect, "three")
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert "topic: three  partitions: 3  replication factor: 3  under-replicated: 3" in out
    assert "  config: min.insync.replicas=2" in out
    assert sum(line.endswith("under-replicated") for line in out) == 3

    # the controller itself dies, and /controller_epoch is garbage by then: another
    # takes over within the session timeout, in an epoch above every state node's
    # (not 1, which the last broker, having seen this epoch, would refuse)
    zk.set(replica_nodes.CONTROLLER_EPOCH, b"garbage")
    kill_hard(brokers[holder])
    brokers[holder].kill_tree()
    (last,) = set(brokers) - {victim, holder}
    # /controller first, then the epoch bump: both within the session timeout
    wait_until(lambda: controller(zk) == (last, epoch + 1), timeout=SESSION_MS / 1000 + 8)
    # and it rebuilt its view: every partition is led by the last broker or no one
    wait_until(lambda: all(state(zk, "two", p)["leader"] in (last, -1) for p in range(4)),
               timeout=8)
    for p in range(4):
        s = state(zk, "two", p)
        if last in assignment[str(p)]:
            assert (s["leader"], s["isr"]) == (last, [last])
        else:  # no replica left in sync: offline, its last ISR member kept
            assert s["leader"] == -1 and s["isr"] and last not in s["isr"]
    assert "refused controller epoch" not in brokers[last].log()


def test_tools_refuse_bad_arguments_in_one_line(make_broker, tmp_path, cluster):  # noqa: F811
    connect, zk = cluster
    start(make_broker, tmp_path, connect, zk, 1)
    result = create(connect, "t", 1, 2)
    assert one_line_error(result).startswith("hostbroker topics create: cannot place topic t:")
    assert result.returncode == 1
    result = create(connect, "t", 1, 1, "--config", "min.insync.replicas=2")
    assert one_line_error(result) == (
        "hostbroker topics create: --config min.insync.replicas=2: must be a number from 1 "
        "to the replication factor (1)")
    assert result.returncode == 2
    result = create(connect, "t", 1, 1, "--config", "unclean.leader.election.enable=maybe")
    assert (result.returncode, one_line_error(result)) == (
        2, "hostbroker topics create: --config unclean.leader.election.enable=maybe: must be "
           "true or false")
    # without --zookeeper it asks a standalone broker for replicas across its log dirs
    result = hostbroker("topics", "create", "--topic", "t", "--replication-factor", "9")
    assert (result.returncode, one_line_error(result)) == (
        2, "hostbroker topics create: --replication-factor must be 1 to 8")
    result = create(connect, "t", 1, 1, "--config", "unclean.leader.election.enable=true")
    assert result.returncode == 0, result.stderr
    assert json.loads(zk.get(replica_nodes.topic_config_path("t"))[0])["config"] == {
        "unclean.leader.election.enable": "true"}
    result = create(connect, "t", 1, 1)
    assert one_line_error(result) == "hostbroker topics create: topic t already exists in ZooKeeper"
    wait_until(lambda: state(zk, "t", 0) is not None)

    result = hostbroker("leaders", "elect", "--zookeeper", connect, "--topic", "nope")
    assert "hostbroker leaders elect: no replicated topic nope" in result.stderr.decode()
    assert result.returncode == 1

    bad = tmp_path / "bad.json"
    bad.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}')
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", bad)
    assert one_line_error(result) == (
        f"hostbroker reassign execute: --reassignment-json-file: {bad}: "
        "{'topic': 't', 'partition': 0, 'replicas': [1, 1]}: replicas must be distinct "
        "broker ids")
    far = tmp_path / "far.json"
    far.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[9]}]}')
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", far)
    assert one_line_error(result) == "hostbroker reassign execute: t-0: broker 9 not live"


def test_delete_preferred_election_and_reassignment_through_admin_nodes(
        make_broker, tmp_path, cluster):  # noqa: F811
    connect, zk = cluster
    for i in (1, 2, 3):
        start(make_broker, tmp_path, connect, zk, i)
    wait_until(lambda: controller(zk) is not None)
    zk.create(replica_nodes.assignment_path("moving"),
              b'{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}', makepath=True)
    wait_until(lambda: state(zk, "moving", 1) is not None)

    # preferred election: partition 1 led by 3 (as after a failover), 2 back in sync
    data, stat = zk.get(replica_nodes.state_path("moving", 1))
    s = json.loads(data)
    zk.set(replica_nodes.state_path("moving", 1), json.dumps(
        {**s, "leader": 3, "leader_epoch": 4, "isr": [3, 2]}).encode(), version=stat.version)
    result = hostbroker("leaders", "elect", "--zookeeper", connect, "--topic", "moving")
    assert (result.returncode, lines(result)) == (
        0, ["preferred replica election started for 1 partition"]), result.stderr
    wait_until(lambda: zk.exists(replica_nodes.PREFERRED_REPLICA_ELECTION) is None)
    s = state(zk, "moving", 1)
    assert (s["leader"], s["leader_epoch"], s["isr"]) == (2, 5, [3, 2])
    result = hostbroker("leaders", "elect", "--zookeeper", connect)
    assert lines(result) == ["every partition is led by its preferred replica"]

    # reassignment: partition 0 from [1, 2] to [3, 2]; broker 3 is told to follow, the
    # leader puts it in the ISR once it caught up, then leadership moves into the new set
    plan = tmp_path / "plan.json"
    plan.write_text(
        '{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[3,2]}]}')
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", plan)
    assert result.returncode == 0, result.stderr
    assert lines(result)[1] == '{"version":1,"partitions":[{"topic":"moving","partition":0,' \
                               '"replicas":[1,2]}]}'
    result = hostbroker("reassign", "verify", "--zookeeper", connect,
                        "--reassignment-json-file", plan)
    assert lines(result) in (["moving-0: in progress"], ["moving-0: done"])
    wait_until(lambda: zk.exists(replica_nodes.REASSIGN_PARTITIONS) is None, timeout=20)
    moved = json.loads(zk.get(replica_nodes.assignment_path("moving"))[0])
    assert moved["partitions"]["0"] == [3, 2]
    s = state(zk, "moving", 0)
    assert (s["leader"], s["leader_epoch"], sorted(s["isr"])) == (3, 1, [2, 3])
    # the old replica is removed from broker 1 (STOP_REPLICA with delete)
    wait_until(lambda: not (tmp_path / "b1" / "logs" / "moving_0").exists())
    assert (tmp_path / "b3" / "logs" / "moving_0").is_dir()
    result = hostbroker("reassign", "verify", "--zookeeper", connect,
                        "--reassignment-json-file", plan)
    assert (result.returncode, lines(result)) == (0, ["moving-0: done"])

    # the replication factor changes with a reassignment: partition 0 from [3, 2] to
    # [3] (broker 2's copy deleted), partition 1 from [2, 3] to [2, 3, 1] (broker 1
    # catches up and joins the ISR)
    plan.write_text('{"version":1,"partitions":[{"topic":"moving","partition":0,'
                    '"replicas":[3]},{"topic":"moving","partition":1,"replicas":[2,3,1]}]}')
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", plan)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: zk.exists(replica_nodes.REASSIGN_PARTITIONS) is None, timeout=20)
    assert json.loads(zk.get(replica_nodes.assignment_path("moving"))[0])["partitions"] == {
        "0": [3], "1": [2, 3, 1]}
    s0, s1 = state(zk, "moving", 0), state(zk, "moving", 1)
    assert (s0["leader"], s0["isr"]) == (3, [3])
    assert (s1["leader"], sorted(s1["isr"])) == (2, [1, 2, 3])
    wait_until(lambda: not (tmp_path / "b2" / "logs" / "moving_0").exists())
    assert (tmp_path / "b1" / "logs" / "moving_1").is_dir()
    result = hostbroker("reassign", "verify", "--zookeeper", connect,
                        "--reassignment-json-file", plan)
    assert (result.returncode, lines(result)) == (0, ["moving-0: done", "moving-1: done"])
    result = hostbroker("topics", "describe", "--zookeeper", connect, "--json", "moving")
    (described,) = json.loads(result.stdout)["topics"]
    assert [p["replicas"] for p in described["partitions"]] == [[3], [2, 3, 1]]

    # deletion: the controller removes every node of the topic, then the request
    result = hostbroker("topics", "delete", "--zookeeper", connect, "--topic", "moving")
    assert lines(result) == ["topic moving marked for deletion (the controller removes its "
                             "replicas)"]
    wait_until(lambda: zk.exists(replica_nodes.assignment_path("moving")) is None)
    wait_until(lambda: zk.get_children(replica_nodes.DELETE_TOPICS) == [])
    # and every replica is gone from the brokers (STOP_REPLICA with delete)
    wait_until(lambda: not any(d.name.startswith("moving_")
                               for i in (1, 2, 3) for d in (tmp_path / f"b{i}" / "logs").iterdir()))


def leader_and_isr(broker, controller_id: int, controller_epoch: int) -> int:
    """Send a LEADER_AND_ISR of no partitions to ``broker`` as controller ``controller_id``
    in ``controller_epoch``; its error code."""
    import socket
    import struct

    from hostbroker.protocol import replication as rp

    frame = rp.encode_request(rp.LeaderAndIsrRequest(controller_id, controller_epoch, ()), 7,
                              "test")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(broker.unix_path)
        sock.sendall(frame)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        answer = sock.recv(size, socket.MSG_WAITALL)
    return rp.decode_response(answer, rp.LeaderAndIsrResponse)[1].error_code


def test_a_broker_that_saw_a_newer_epoch_makes_the_controller_take_a_new_one(
        make_broker, tmp_path, cluster):  # noqa: F811
    connect, zk = cluster
    brokers = {i: start(make_broker, tmp_path, connect, zk, i) for i in (1, 2)}
    wait_until(lambda: controller(zk) is not None)
    holder, epoch = controller(zk)
    other = 3 - holder
    # ZooKeeper's epoch moved past the controller's own (say controllers cut off and
    # replaced meanwhile), and a request of that epoch reached the other broker: our
    # epoch is stale there now (a client's epoch past ZooKeeper's is never taken)
    assert leader_and_isr(brokers[other], holder, epoch + 5) == 29  # not confirmed
    zk.set(replica_nodes.CONTROLLER_EPOCH, str(epoch + 5).encode())
    wait_until(lambda: leader_and_isr(brokers[other], holder, epoch + 5) == 0)
    assert leader_and_isr(brokers[other], holder, epoch) == 25  # STALE_CONTROLLER_EPOCH
    # and /controller_epoch is garbage now, no state node has seen epoch + 5: the
    # broker's stale answer says its highest, and the controller goes past it at once
    # (not one epoch every 5 s from 1)
    zk.set(replica_nodes.CONTROLLER_EPOCH, b"garbage")
    assert create(connect, "after", 1, 2).returncode == 0
    wait_until(lambda: controller(zk) == (holder, epoch + 6), timeout=10)
    assert f"a broker refused controller epoch {epoch}" in brokers[holder].log()
    # told again in the new epoch, the broker took the partition
    wait_until(lambda: (tmp_path / f"b{other}" / "logs" / "after_0").is_dir())


def test_a_broker_stopped_with_sigterm_hands_its_leaderships_over_first(
        make_broker, tmp_path, cluster):  # noqa: F811
    connect, zk = cluster
    brokers = three_brokers(make_broker, tmp_path, connect, zk)
    holder, _ = controller(zk)
    zk.create(replica_nodes.assignment_path("calm"),
              b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1],"2":[3,1,2]}}',
              makepath=True)
    wait_until(lambda: all(state(zk, "calm", p) is not None for p in range(3)))
    # the leaders' brokers hold their replicas now (LEADER_AND_ISR came)
    for i in brokers:
        wait_until(lambda: all((tmp_path / f"b{i}" / "logs" / f"calm_{p}").is_dir()
                               for p in range(3)))
    # the controller's own broker first (it moves its leaderships itself), then the others
    for stopping in [holder] + [i for i in (1, 2, 3) if i != holder]:
        before = {p: state(zk, "calm", p) for p in range(3)}
        led = [p for p in range(3) if before[p]["leader"] == stopping]
        events = []
        watching = [True]

        def on_ids(children):
            if str(stopping) not in children:
                events.append("gone")
            return watching[0]

        def on_state(p):
            def on_data(data, stat):
                if data is not None and json.loads(data)["leader"] != before[p]["leader"]:
                    events.append(f"moved {p}")
                return watching[0]
            return on_data

        zk.ChildrenWatch("/brokers/ids", on_ids)
        for p in led:
            zk.DataWatch(replica_nodes.state_path("calm", p), on_state(p))
        assert brokers[stopping].stop(timeout=30) == 0
        wait_until(lambda: "gone" in events)
        watching[0] = False
        if led and (set(brokers) - {stopping}) & set(before[led[0]]["isr"]):
            # the leaderships moved while the broker was still registered
            assert events[0].startswith("moved"), events
        after = {p: state(zk, "calm", p) for p in range(3)}
        live = {i for i in brokers if brokers[i].proc is not None}
        for p in range(3):
            if p in led and live & set(before[p]["isr"]):
                # moved before the broker was gone: one new epoch, not a failover's
                assert after[p]["leader"] in live, (stopping, p, before[p], after[p])
                assert after[p]["leader_epoch"] == before[p]["leader_epoch"] + 1
            if live & set(before[p]["isr"]):
                assert stopping not in after[p]["isr"], (stopping, p, after[p])
        if not live:
            break
        wait_until(lambda: (controller(zk) or (stopping,))[0] in live,
                   timeout=SESSION_MS / 1000 + 8)
    assert "did not stop" not in "".join(b.log() for b in brokers.values())


def test_a_broker_back_after_a_crash_is_told_its_partitions_and_deletions_it_missed(
        make_broker, tmp_path, cluster):  # noqa: F811
    connect, zk = cluster
    brokers = three_brokers(make_broker, tmp_path, connect, zk)
    holder, _ = controller(zk)
    assert create(connect, "back", 3, 3).returncode == 0
    assert create(connect, "doomed", 2, 3).returncode == 0
    wait_until(lambda: all(state(zk, "back", p) is not None for p in range(3)))
    wait_until(lambda: all((tmp_path / f"b{i}" / "logs" / f"doomed_{p}").is_dir()
                           for i in brokers for p in range(2)))
    victim = next(i for i in brokers if i != holder)
    kill_hard(brokers[victim])
    brokers[victim].kill_tree()
    wait_until(lambda: all(victim not in state(zk, "back", p)["isr"] for p in range(3)),
               timeout=SESSION_MS / 1000 + 8)
    assert all(state(zk, "back", p)["leader"] != victim for p in range(3))

    # a topic deleted while one of its replica brokers is down: the live ones delete
    # their copies; the deletion stays pending (nodes kept, the name not free)
    result = hostbroker("topics", "delete", "--zookeeper", connect, "--topic", "doomed")
    assert result.returncode == 0, result.stderr
    wait_until(lambda: not any((tmp_path / f"b{i}" / "logs" / f"doomed_{p}").exists()
                               for i in brokers if i != victim for p in range(2)))
    time.sleep(0.5)  # the answers are in; nothing more happens while the victim is down
    assert zk.exists(replica_nodes.delete_topic_path("doomed")) is not None
    assert zk.exists(replica_nodes.assignment_path("doomed")) is not None
    result = hostbroker("topics", "describe", "--zookeeper", connect, "doomed")
    assert any(line.startswith("topic: doomed ") and line.endswith("(marked for deletion)")
               for line in lines(result)), lines(result)
    result = hostbroker("topics", "describe", "--zookeeper", connect, "--json", "doomed")
    assert [t["marked_for_deletion"] for t in json.loads(result.stdout)["topics"]] == [True]
    result = create(connect, "doomed", 1, 1)
    assert (result.returncode, one_line_error(result)) == (
        1, "hostbroker topics create: topic doomed is marked for deletion; create it again "
           "once the controller has deleted every replica")

    brokers[victim].start()
    # told its partitions (LEADER_AND_ISR), it follows the leaders; each leader puts it
    # back in the ISR (the registrar's ISR commit) once it has caught up
    wait_until(lambda: all(victim in state(zk, "back", p)["isr"] for p in range(3)),
               timeout=20)
    for p in range(3):
        s = state(zk, "back", p)
        assert s["leader"] != victim and sorted(s["isr"]) == [1, 2, 3]
    # and told to delete what it missed: its copies go, then the topic's nodes
    wait_until(lambda: not any((tmp_path / f"b{victim}" / "logs" / f"doomed_{p}").exists()
                               for p in range(2)))
    wait_until(lambda: zk.exists(replica_nodes.delete_topic_path("doomed")) is None)
    assert zk.exists(replica_nodes.assignment_path("doomed")) is None
    assert create(connect, "doomed", 1, 1).returncode == 0


def _asked_again(condition):
    """``condition``, with a ZooKeeper error while asking taken as false."""
    from kazoo.exceptions import KazooException

    def asked() -> bool:
        try:
            return condition()
        except KazooException:
            return False
    return asked


def test_after_a_zookeeper_outage_the_controller_still_moves_leaders(
        make_broker, tmp_path, cluster, zkserver):  # noqa: F811
    connect, zk = cluster
    brokers = three_brokers(make_broker, tmp_path, connect, zk)
    assert create(connect, "outage", 3, 3).returncode == 0
    wait_until(lambda: all(state(zk, "outage", p) is not None for p in range(3)))
    zkserver.stop()
    time.sleep(1.5 * SESSION_MS / 1000)  # the brokers serve on without ZooKeeper
    zkserver.start()
    # this test's own session may have expired meanwhile: kazoo opens a new one, and a
    # read that meets the old one's end counts as "not yet"
    wait_until(_asked_again(lambda: controller(zk) is not None and all(
        zk.exists(f"/brokers/ids/{i}") for i in brokers)), timeout=SESSION_MS / 1000 + 10)
    holder, _ = controller(zk)
    victim = next(i for i in brokers if i != holder)
    kill_hard(brokers[victim])
    brokers[victim].kill_tree()
    wait_until(_asked_again(lambda: all(victim not in state(zk, "outage", p)["isr"]
                                        for p in range(3))), timeout=SESSION_MS / 1000 + 10)
    assert all(state(zk, "outage", p)["leader"] not in (victim, -1) for p in range(3))


def test_replicas_verify_compares_the_copies_below_the_high_watermark(
        make_broker, tmp_path, cluster):  # noqa: F811
    from hostbroker.log.message import encode_message_set
    from hostbroker.protocol import replication as rp

    import signal

    import psutil

    connect, zk = cluster
    # the follower's hb-replica is SIGSTOPped below: its supervisor must not replace it
    quick = {"replica.lag.time.max.ms": 2000, "replica.fetch.wait.max.ms": 100,
             "worker.heartbeat.timeout.ms": 30000}
    brokers = {i: start(make_broker, tmp_path, connect, zk, i, **quick) for i in (1, 2)}
    wait_until(lambda: controller(zk) is not None)
    assert create(connect, "same", 1, 2).returncode == 0
    wait_until(lambda: sorted((state(zk, "same", 0) or {}).get("isr", [])) == [1, 2])
    leader = state(zk, "same", 0)["leader"]
    follower = 3 - leader
    with brokers[leader].client() as c:
        c.produce("same", 0, encode_message_set([b"a" * 100, b"b" * 100]), acks=-1)
    expected = 2 * (100 + 10)

    def verified():
        result = hostbroker("replicas", "verify", "--zookeeper", connect)
        return result if result.returncode == 0 and lines(result) == [
            f"same-0: 2 replicas equal below {expected}"] else None

    try:
        wait_until(verified, timeout=15)
    except AssertionError:
        result = hostbroker("replicas", "verify", "--zookeeper", connect)
        raise AssertionError((result.returncode, result.stdout, result.stderr)) from None
    # The follower's fetcher stopped: it leaves the ISR, and the leader's high watermark
    # passes the follower's. Every copy (read over the wire, the follower's from its
    # own log) is compared below the smallest of them, so they are still equal.
    fetchers = [p for p in psutil.Process(brokers[follower].proc.pid).children()
                if p.name().startswith("hb-replica")]
    assert len(fetchers) == 1
    fetchers[0].send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: state(zk, "same", 0)["isr"] == [leader], timeout=20)
        with brokers[leader].client() as c:
            c.produce("same", 0, encode_message_set([b"c" * 100]), acks=1)
        result = hostbroker("replicas", "verify", "--zookeeper", connect, "--topic", "same")
        assert (result.returncode, lines(result)) == (
            0, [f"same-0: 2 replicas equal below {expected}"]), result.stderr
    finally:
        fetchers[0].send_signal(signal.SIGCONT)
    wait_until(lambda: sorted(state(zk, "same", 0)["isr"]) == [1, 2], timeout=30)
    expected += 100 + 10
    wait_until(verified, timeout=15)
    # a byte of the follower's copy flipped below the high watermark
    segment = tmp_path / f"b{follower}" / "logs" / "same_0" / f"{0:020d}.kafka"
    data = bytearray(segment.read_bytes())
    data[50] ^= 0xFF
    segment.write_bytes(bytes(data))
    result = hostbroker("replicas", "verify", "--zookeeper", connect, "--topic", "same")
    assert (result.returncode, lines(result)) == (
        1, [f"same-0: below {expected}: broker {follower} differs from the leader ({leader})"])
    assert rp  # the wire codecs the tool speaks


def test_a_broker_gone_leaves_the_isr_a_leader_committed_behind_the_controllers_back(
        cluster):  # noqa: F811
    """The controller's class on ZooKeeper alone: an ISR grown by a leader's commit
    (not by the controller) still loses a broker that dies."""
    from hostbroker.cluster import paths
    from hostbroker.cluster.controller import Controller

    _, zk = cluster
    for i in (1, 2, 3):
        zk.create(paths.broker_path(i), paths.encode_broker(
            paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)), makepath=True)
    zk.create(replica_nodes.assignment_path("grown"),
              replica_nodes.encode_assignment({0: [1, 2, 3]}),
              makepath=True)
    zk.create(replica_nodes.state_path("grown", 0),
              b'{"version":1,"leader":1,"leader_epoch":0,"isr":[1,2],"controller_epoch":0}',
              makepath=True)
    told = []
    c = Controller(zk, 1, told.append)
    assert c.try_elect()
    c.rebuild()
    data, stat = zk.get(replica_nodes.state_path("grown", 0))
    zk.set(replica_nodes.state_path("grown", 0), data.replace(b"[1,2]", b"[1,2,3]"),
           version=stat.version)  # the leader's ISR commit
    zk.delete(paths.broker_path(3))
    c.brokers_changed()
    s = state(zk, "grown", 0)
    assert (s["leader"], s["leader_epoch"], s["isr"]) == (1, 0, [1, 2])
    assert told[-1].partitions[("grown", 0)][0].isr == (1, 2)



class _IsrShrinksAfterRead:
    """A kazoo client whose next read of ``path`` is followed, before the caller
    goes on, by a real write of ``isr`` to it (a leader's ISR commit landing
    between the controller's read and its version-checked write)."""

    def __init__(self, client, path: str, isr: bytes):
        self.client, self.path, self.isr, self.armed = client, path, isr, False

    def __getattr__(self, name):
        return getattr(self.client, name)

    def get_async(self, path, *args, **kwargs):
        result = self.client.get_async(path, *args, **kwargs)
        if self.armed and path == self.path:
            self.armed = False
            data, stat = result.get(timeout=5)
            self.client.set(path, data.replace(b"[1,3]", self.isr), version=stat.version)
        return result


def test_a_reassignment_does_not_finish_when_a_new_replica_leaves_the_isr_meanwhile(
        cluster):  # noqa: F811
    """The controller's class on ZooKeeper alone: a partition moving from [1] to [3]
    whose new replica drops out of the ISR (the leader's commit) between the
    controller's read and its write keeps its old replica: the assignment is not
    rewritten and the leader is not told to delete its copy."""
    from hostbroker.cluster import paths
    from hostbroker.cluster.controller import STOP_REPLICA, Controller

    _, zk = cluster
    for i in (1, 3):
        zk.create(paths.broker_path(i), paths.encode_broker(
            paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)), makepath=True)
    zk.create(replica_nodes.assignment_path("moving"), replica_nodes.encode_assignment({0: [1]}),
              makepath=True)
    zk.create(replica_nodes.state_path("moving", 0),
              b'{"version":1,"leader":1,"leader_epoch":0,"isr":[1,3],"controller_epoch":0}',
              makepath=True)
    told = []
    racing = _IsrShrinksAfterRead(zk, replica_nodes.state_path("moving", 0), b"[1]")
    c = Controller(racing, 1, told.append)
    assert c.try_elect()
    c.rebuild()
    zk.create(replica_nodes.REASSIGN_PARTITIONS,
              replica_nodes.encode_reassignment({("moving", 0): [3]}), makepath=True)
    assert c.reassign() == []  # the new replica added: told to follow
    racing.armed = True
    assert c.reassign() == []
    assert not racing.armed
    assert replica_nodes.decode_assignment(zk.get(replica_nodes.assignment_path("moving"))[0],
                                           "moving") == {0: (1,)}
    assert zk.exists(replica_nodes.REASSIGN_PARTITIONS) is not None
    assert not [n for n in told if n.kind == STOP_REPLICA]
    s = state(zk, "moving", 0)
    assert (s["leader"], s["isr"]) == (1, [1])


def test_reassign_generate_proposes_a_plan_that_execute_takes(cluster, tmp_path):  # noqa: F811
    """``reassign generate`` as a user runs it, on ZooKeeper alone: the current
    assignment, and a proposal over the brokers listed (the topic's replication
    factor, partitions that stay as they are left out) that ``execute`` takes."""
    from hostbroker.cluster import paths

    connect, zk = cluster
    for i in (1, 2, 3, 4):
        zk.create(paths.broker_path(i), paths.encode_broker(
            paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)), makepath=True)
    zk.create(replica_nodes.assignment_path("g"),
              replica_nodes.encode_assignment({0: [1, 2], 1: [2, 1]}),
              makepath=True)
    topics = tmp_path / "topics.json"
    topics.write_text('{"version":1,"topics":[{"topic":"g"}]}')
    result = hostbroker("reassign", "generate", "--zookeeper", connect,
                        "--topics-to-move-json-file", topics, "--broker-list", "3,4")
    assert result.returncode == 0, result.stderr
    out = lines(result)
    assert out[0] == "Current partition replica assignment"
    assert json.loads(out[1]) == {"version": 1, "partitions": [
        {"topic": "g", "partition": 0, "replicas": [1, 2]},
        {"topic": "g", "partition": 1, "replicas": [2, 1]}]}
    assert out[2:4] == ["", "Proposed partition reassignment configuration"]
    proposed = json.loads(out[4])
    assert [(e["topic"], e["partition"]) for e in proposed["partitions"]] == [("g", 0), ("g", 1)]
    assert all(sorted(e["replicas"]) == [3, 4] for e in proposed["partitions"])
    plan = tmp_path / "plan.json"
    plan.write_text(out[4])
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", plan)
    assert result.returncode == 0, result.stderr
    assert replica_nodes.decode_reassignment(zk.get(replica_nodes.REASSIGN_PARTITIONS)[0]) == {
        ("g", e["partition"]): tuple(e["replicas"]) for e in proposed["partitions"]}

    result = hostbroker("reassign", "generate", "--zookeeper", connect,
                        "--topics-to-move-json-file", topics, "--broker-list", "3")
    assert one_line_error(result).startswith("hostbroker reassign generate: cannot place "
                                             "topic g: ")

    # asked for, a proposal with another replication factor (execute takes it too)
    result = hostbroker("reassign", "generate", "--zookeeper", connect,
                        "--topics-to-move-json-file", topics, "--broker-list", "2,3,4",
                        "--replication-factor", "3")
    assert result.returncode == 0, result.stderr
    proposed = json.loads(lines(result)[4])
    assert all(sorted(e["replicas"]) == [2, 3, 4] for e in proposed["partitions"])
    result = hostbroker("reassign", "generate", "--zookeeper", connect,
                        "--topics-to-move-json-file", topics, "--broker-list", "2,3,4",
                        "--replication-factor", "9")
    assert one_line_error(result) == (
        "hostbroker reassign generate: --replication-factor must be 1 to 8, not 9")
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", plan, "--replication-factor", "3")
    assert (result.returncode, one_line_error(result)) == (
        2, "hostbroker reassign execute: --replication-factor is for generate (the file's "
           "replica lists say it)")
    # old and new replicas together hold copies during a move: at most 8 of them
    for i in range(5, 11):
        zk.create(paths.broker_path(i), paths.encode_broker(
            paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)), makepath=True)
    zk.delete(replica_nodes.REASSIGN_PARTITIONS)
    plan.write_text('{"version":1,"partitions":[{"topic":"g","partition":0,'
                    '"replicas":[3,4,5,6,7,8,9,10]}]}')
    result = hostbroker("reassign", "execute", "--zookeeper", connect,
                        "--reassignment-json-file", plan)
    assert (result.returncode, one_line_error(result)) == (
        1, "hostbroker reassign execute: g-0: old and new replicas together are 10 brokers, "
           "over the most a partition may have (8); move it in smaller steps")
    assert zk.exists(replica_nodes.REASSIGN_PARTITIONS) is None


def _register(zk, *ids: int) -> None:
    from hostbroker.cluster import paths

    for i in ids:
        zk.create(paths.broker_path(i), paths.encode_broker(
            paths.BrokerInfo(i, "127.0.0.1", 9000 + i, None)), makepath=True)


class _CountingReads:
    """A kazoo client counting its reads of partition state nodes."""

    def __init__(self, client):
        self.client, self.state_reads = client, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def get_async(self, path, *args, **kwargs):
        if path.endswith("/state"):
            self.state_reads += 1
        return self.client.get_async(path, *args, **kwargs)


def test_the_rebuild_reads_each_state_node_once(cluster):  # noqa: F811
    """The controller's class on ZooKeeper alone: what scales is partitions x
    replication factor; the rebuild reads each of the 8 state nodes once (not
    once per broker holding a replica: 8 + 3 x 8 before), and still tells every
    broker all its partitions."""
    from hostbroker.cluster.controller import LEADER_AND_ISR, Controller

    _, zk = cluster
    _register(zk, 1, 2, 3)
    zk.create(replica_nodes.assignment_path("wide"), replica_nodes.encode_assignment(
        {p: [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3] for p in range(8)}), makepath=True)
    Controller(zk, 1, lambda notice: None).try_elect()
    first = Controller(zk, 1, lambda notice: None)
    first.try_elect()
    first.rebuild()  # the state nodes written
    counting, told = _CountingReads(zk), []
    c = Controller(counting, 1, told.append)
    assert c.try_elect()
    c.rebuild()
    assert counting.state_reads == 8
    assert sorted(n.broker_id for n in told if n.kind == LEADER_AND_ISR) == [1, 2, 3]
    assert all(len(n.partitions) == 8 for n in told)


def test_unclean_election_also_when_a_replica_broker_returns(cluster):  # noqa: F811
    """The controller's class on ZooKeeper alone: an offline partition (its only
    ISR member, broker 1, gone) whose other replica, broker 2, registers again
    gets broker 2 as leader only with unclean.leader.election.enable (the broker
    setting, or the topic's config), as Kafka does on a broker's start-up; and a
    controller taking over does the same."""
    from hostbroker.cluster import paths
    from hostbroker.cluster.controller import Controller

    _, zk = cluster
    _register(zk, 3)
    offline = b'{"version":1,"leader":-1,"leader_epoch":4,"isr":[1],"controller_epoch":0}'
    for topic in ("lost", "willing"):
        zk.create(replica_nodes.assignment_path(topic),
                  replica_nodes.encode_assignment({0: [1, 2]}),
                  makepath=True)
        zk.create(replica_nodes.state_path(topic, 0), offline, makepath=True)
    zk.create(replica_nodes.topic_config_path("willing"), replica_nodes.encode_topic_config(
        {"unclean.leader.election.enable": "true", "min.insync.replicas": "1"}), makepath=True)
    told = []
    clean = Controller(zk, 3, told.append)
    assert clean.try_elect()
    clean.rebuild()
    _register(zk, 2)
    clean.brokers_changed()
    s = state(zk, "lost", 0)
    assert (s["leader"], s["isr"]) == (-1, [1])  # no unclean election by default
    s = state(zk, "willing", 0)
    assert (s["leader"], s["isr"]) == (2, [2])  # but the topic's config says yes
    # the controller's own config is not sent to the brokers (they take log configs)
    assert told[-1].configs["willing"] == {"min.insync.replicas": "1"}

    told = []
    c = Controller(zk, 3, told.append, unclean=True)
    assert c.try_elect()
    c.rebuild()  # a new controller: broker 2 is live, the partition offline
    s = state(zk, "lost", 0)
    assert (s["leader"], s["leader_epoch"], s["isr"]) == (2, 5, [2])
    # gone and back again: offline once more, then elected on its return
    zk.delete(paths.broker_path(2))
    c.brokers_changed()
    s = state(zk, "lost", 0)
    assert (s["leader"], s["isr"]) == (-1, [2])
    data, stat = zk.get(replica_nodes.state_path("lost", 0))
    zk.set(replica_nodes.state_path("lost", 0), offline, version=stat.version)
    _register(zk, 2)
    c.brokers_changed()
    s = state(zk, "lost", 0)
    assert (s["leader"], s["isr"]) == (2, [2])
    assert told[-1].broker_id == 2 and told[-1].partitions[("lost", 0)][0].leader == 2


def test_a_pending_deletion_is_resumed_by_a_new_controller(cluster):  # noqa: F811
    """The controller's class on ZooKeeper alone: a deletion whose replica broker 3
    is down stays pending with every node; a controller that takes over tells the
    live replicas again (STOP_REPLICA is idempotent) and keeps the topic out of
    its view (no LEADER_AND_ISR about it); broker 3 back gets its STOP_REPLICA,
    and once every replica has answered the nodes go, then the request."""
    from hostbroker.cluster.controller import LEADER_AND_ISR, STOP_REPLICA, Controller

    connect, zk = cluster
    _register(zk, 1, 2)
    zk.create(replica_nodes.assignment_path("doomed"),
              replica_nodes.encode_assignment({0: [1, 2, 3], 1: [2, 3, 1]}), makepath=True)
    zk.create(replica_nodes.topic_config_path("doomed"), replica_nodes.encode_topic_config({}),
              makepath=True)
    told = []
    c = Controller(zk, 1, told.append)
    assert c.try_elect()
    c.rebuild()
    zk.create(replica_nodes.delete_topic_path("doomed"), b"", makepath=True)
    told.clear()
    c.delete_topics()
    stops = {n.broker_id: n for n in told if n.kind == STOP_REPLICA}
    assert sorted(stops) == [1, 2] and all(n.delete for n in stops.values())
    assert sorted(stops[1].stop) == [("doomed", 0), ("doomed", 1)]
    for n in stops.values():
        c.replicas_deleted(n)
    c.delete_topics()
    for path in (replica_nodes.delete_topic_path("doomed"),
                 replica_nodes.assignment_path("doomed"), replica_nodes.state_path("doomed", 0),
                 replica_nodes.topic_config_path("doomed")):
        assert zk.exists(path) is not None, path

    told.clear()
    again = Controller(zk, 1, told.append)
    assert again.try_elect()
    again.rebuild()
    assert "doomed" not in again.topics
    assert not any(("doomed", p) in n.partitions for n in told for p in (0, 1))
    assert sorted(n.broker_id for n in told if n.kind == STOP_REPLICA) == [1, 2]
    for n in told:
        again.replicas_deleted(n)
    assert zk.exists(replica_nodes.delete_topic_path("doomed")) is not None
    told.clear()
    _register(zk, 3)
    again.brokers_changed()
    again.topics_changed()
    (back,) = [n for n in told if n.kind == STOP_REPLICA]
    assert back.broker_id == 3 and sorted(back.stop) == [("doomed", 0), ("doomed", 1)]
    assert not [n for n in told if n.kind == LEADER_AND_ISR]
    again.replicas_deleted(back)
    for path in (replica_nodes.delete_topic_path("doomed"),
                 replica_nodes.assignment_path("doomed"),
                 replica_nodes.topic_config_path("doomed")):
        assert zk.exists(path) is None, path
    assert "doomed" not in again.deleting


def test_a_copy_moved_away_from_a_broker_that_is_down_is_deleted_when_it_returns(
        cluster):  # noqa: F811
    """The controller's class on ZooKeeper alone: a partition moved from [1, 2] to
    [1, 3] while broker 2 is down finishes without it; broker 2 back is told to
    delete its copy (STOP_REPLICA with delete), and once it has answered, never
    again. A copy moved back to a broker before it returns is not deleted."""
    from hostbroker.cluster import paths
    from hostbroker.cluster.controller import STOP_REPLICA, Controller

    _, zk = cluster
    _register(zk, 1, 3)
    zk.create(replica_nodes.assignment_path("m"),
              replica_nodes.encode_assignment({0: [1, 2], 1: [1, 2]}),
              makepath=True)
    zk.create(replica_nodes.state_path("m", 0),
              b'{"version":1,"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":0}',
              makepath=True)
    zk.create(replica_nodes.state_path("m", 1),
              b'{"version":1,"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":0}',
              makepath=True)
    told = []
    c = Controller(zk, 1, told.append)
    assert c.try_elect()
    c.rebuild()

    def moved(p: int, target: list[int]) -> None:
        zk.create(replica_nodes.REASSIGN_PARTITIONS,
                  replica_nodes.encode_reassignment({("m", p): target}), makepath=True)
        assert c.reassign() == []  # the new replicas told to follow
        data, stat = zk.get(replica_nodes.state_path("m", p))  # they caught up (leader's commit)
        zk.set(replica_nodes.state_path("m", p), data.replace(b'"isr":[1]', b'"isr":[1,3]'),
               version=stat.version)
        assert c.reassign() == [("m", p)]

    moved(0, [1, 3])
    moved(1, [1, 3])
    assert not [n for n in told if n.kind == STOP_REPLICA]  # broker 2 is down
    # partition 1 goes back to broker 2 before it returns: that copy is wanted again
    zk.create(replica_nodes.REASSIGN_PARTITIONS,
              replica_nodes.encode_reassignment({("m", 1): [1, 2]}), makepath=True)
    assert c.reassign() == []
    told.clear()
    _register(zk, 2)
    c.brokers_changed()
    stops = [n for n in told if n.kind == STOP_REPLICA]
    assert [(n.broker_id, n.stop, n.delete) for n in stops] == [(2, [("m", 0)], True)]
    c.replicas_deleted(stops[0])
    told.clear()
    zk.delete(paths.broker_path(2))
    c.brokers_changed()
    _register(zk, 2)
    c.brokers_changed()
    assert not [n for n in told if n.kind == STOP_REPLICA]
