"""Standing cases: whoever can write to the cluster's ZooKeeper (issue 34).

Every reader of ZooKeeper leaves out what passes a bound, with one line, and
goes on with the rest; a broker puts back its own nodes when they are deleted,
rewritten or taken over; a second broker with a live broker's id never accepts
a connection. Real ZooKeeper, real brokers.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time

import psutil

from hostbroker.cluster import paths, zkread
from hostbroker.cluster.discovery import read_snapshot
from hostbroker.cluster.membership import GroupMember
from tests.cluster.conftest import zk, zookeeper  # noqa: F401 - fixtures
from tests.cluster.test_broker_registration import cluster_broker, node, registered
from tests.cluster.test_discovery import wait_until
from tests.cluster.test_zk_trust import owner_of
from tests.integration.conftest import make_broker  # noqa: F401 - fixture


class Said:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __call__(self, path: str, problem: str) -> None:
        self.lines.append((path, problem))


def live_broker(zk, broker_id=1, port=9092):
    info = paths.BrokerInfo(broker_id, "127.0.0.1", port, None)
    zk.create(paths.broker_path(broker_id), paths.encode_broker(info), makepath=True)


def test_hostile_cluster_nodes_are_left_out_with_one_line_each(zk):  # noqa: F811
    live_broker(zk)
    zk.create(paths.topic_broker_path("real", 1), b"3", makepath=True)
    hostile = {
        paths.topic_broker_path("phantom", 1): b"10000000",
        paths.topic_broker_path("minus", 1): b"-1",
        paths.topic_broker_path("long", 1): b"9" * 100_000,
        paths.topic_broker_path("float", 1): b"1e9",
        paths.broker_path(2): b"[" * 15_000 + b"]" * 15_000,
        paths.broker_path(3): json.dumps({"version": 1, "host": "h" * 5000, "port": 1}).encode(),
        paths.broker_path(4): json.dumps({"version": 1, "port": 2**40, "host": "h"}).encode(),
        paths.broker_path(5): b"\xff\xfe",
        f"{paths.BROKER_IDS}/99999999999999999999": b"{}",
    }
    for path, value in hostile.items():
        zk.create(path, value, makepath=True)
    said = Said()
    before = psutil.Process().memory_info().rss
    started = time.monotonic()
    snapshot = read_snapshot(zk, said)
    assert time.monotonic() - started < 5
    assert psutil.Process().memory_info().rss - before < 20 << 20
    assert sorted(snapshot.brokers) == [1]
    assert snapshot.topics == {"real": ((1, 0), (1, 1), (1, 2))}
    assert sorted(p for p, _ in said.lines) == sorted(hostile)  # one line each
    assert all("\n" not in problem and len(problem) < 300 for _, problem in said.lines)


def test_too_many_children_are_cut_to_the_bound(zk):  # noqa: F811
    live_broker(zk)
    zk.ensure_path(paths.BROKER_TOPICS)
    for i in range(300):
        zk.create_async(paths.topic_broker_path(f"t{i:03d}", 1), b"1", makepath=True)
    wait_until(lambda: len(zk.get_children(paths.BROKER_TOPICS)) == 300, 30)
    said = Said()
    bounds = zkread.Bounds.of({"zookeeper.max.children": 100, "zookeeper.max.partitions": 50})
    snapshot = read_snapshot(zk, said, bounds)
    assert len(snapshot.topics) == 50  # the whole cluster's partitions bounded too
    assert [p for p, _ in said.lines].count(paths.BROKER_TOPICS) == 1


def test_huge_or_malformed_consumer_registrations_are_left_out_of_the_rebalance(zk):  # noqa: F811
    ids = paths.group_ids_path("g")
    bad = {
        f"{ids}/huge": json.dumps({"t": 10_000_000}).encode(),
        f"{ids}/deep": b"{" * 10_000,
        f"{ids}/many": json.dumps({f"t{i}": 1 for i in range(15_000)}).encode(),
        f"{ids}/neg": json.dumps({"t": -5}).encode(),
    }
    zk.create(f"{ids}/good", json.dumps({"t": 2}).encode(), makepath=True)
    for path, value in bad.items():
        zk.create(path, value, makepath=True)
    member = GroupMember(zk, "g", owner=None, subscription=lambda _s: {})
    said = Said()
    member.report = said
    before = psutil.Process().memory_info().rss
    assert member.members() == {"good": {"t": 2}}
    assert psutil.Process().memory_info().rss - before < 20 << 20
    assert sorted(p for p, _ in said.lines) == sorted(bad)


def test_a_group_past_its_stream_bound_keeps_the_first_members(zk):  # noqa: F811
    ids = paths.group_ids_path("g")
    for i in range(5):
        zk.create(f"{ids}/c{i}", json.dumps({"t": 1000}).encode(), makepath=True)
    member = GroupMember(zk, "g", owner=None, subscription=lambda _s: {},
                         bounds=zkread.Bounds.of({"zookeeper.max.group.streams": 3000}))
    said = Said()
    member.report = said
    assert sorted(member.members()) == ["c0", "c1", "c2"]
    assert len(said.lines) == 2 and all("zookeeper.max.group.streams" in p
                                        for _, p in said.lines)


def test_a_forged_broker_registration_is_taken_back(make_broker, tmp_path, zookeeper,  # noqa: F811
                                                     zk):  # noqa: F811
    from kazoo.client import KazooClient

    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1)
    path = paths.broker_path(1)
    other = KazooClient(hosts=zookeeper.connect, timeout=5.0)
    other.start(timeout=10)
    try:
        # At once: between a delete and a create the registrar may put its own node back.
        forgery = other.transaction()
        forgery.delete(path)
        forgery.create(path, paths.encode_broker(paths.BrokerInfo(1, "127.0.0.1", 1, None)))
        assert all(r is True or isinstance(r, str) for r in forgery.commit())
        wait_until(lambda: owner_of(zk, path) not in (None, 0), 5)
        assert json.loads(node(zk, path)) == registered(broker, 1)
    finally:
        other.stop()
        other.close()
    assert sum("put it back" in line for line in broker.log().splitlines()) == 1


def test_a_duplicate_broker_id_never_accepts_a_connection(make_broker, tmp_path,  # noqa: F811
                                                           zookeeper, zk):  # noqa: F811
    first = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1)
    before = zk.get(paths.broker_path(1))
    second = cluster_broker(make_broker, tmp_path, zookeeper, zk, 2, start=False,
                            **{"broker.id": 1})
    proc = subprocess.Popen(second.args(), cwd=second.root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    accepted: list[str] = []
    tries = 0
    try:
        while proc.poll() is None and tries < 20000:
            tries += 1
            for family, where in ((socket.AF_INET, ("127.0.0.1", second.port)),
                                  (socket.AF_UNIX, second.unix_path)):
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    try:
                        s.connect(where)
                        accepted.append(str(where))
                    except OSError:
                        pass  # refused, or nothing there yet
            time.sleep(0.002)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert accepted == [], f"the duplicate accepted connections: {accepted[:3]}"
    assert tries > 5  # it was probed while it started
    assert proc.returncode == 78
    text = err.decode()
    assert text.count("\n") == 1 and "Traceback" not in text, text
    assert "broker.id 1 is already registered in ZooKeeper by another broker" in text
    data, stat = zk.get(paths.broker_path(1))
    assert (data, stat.ephemeralOwner, stat.mzxid) == (before[0], before[1].ephemeralOwner,
                                                       before[1].mzxid)
    with first.client() as c:
        assert c.metadata().broker_id == 1
