"""Standing cases: plain topics under a replicated topic's name (issue 35).

A broker holding no replica of a replicated topic must not make a plain topic
of that name (a produce with stale metadata, or a CREATE_TOPIC, would land
acknowledged writes outside the replicated topic). The registrar publishes the
replicated names it reads from ZooKeeper (hostbroker/workers/registrar_names.py,
shm/topicnames.py), failing closed on anything hostile: a topic node that is
too long or not an assignment counts as replicated, more topics than
``zookeeper.max.children`` make every name count as replicated, a torn or
unfinished write reads as no view at all (creation refused retriably), and a
hash collision only refuses. A 0.7-style topic (no value) stays plain.

A real ZooKeeper (one for the module, a chroot per test); the registrar's
reader runs on its own over a real shared memory region.
"""

from __future__ import annotations

import itertools
import os
import time
from types import SimpleNamespace

import pytest

from hostbroker.cluster import zkread
from hostbroker.cluster import replica_nodes
from hostbroker.shm.region import SharedRegion
from hostbroker.shm.topicnames import ReplicatedNames, name_hash
from hostbroker.workers.registrar_names import ReplicatedTopics
from tests.cluster.zkserver import ZooKeeperServer

_roots = itertools.count()


@pytest.fixture(scope="module")
def zkserver(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    yield server
    server.stop()


@pytest.fixture
def client(zkserver):
    from kazoo.client import KazooClient

    chroot = f"/names{next(_roots)}"
    root = KazooClient(hosts=zkserver.connect, timeout=5.0)
    root.start(timeout=10)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    c = KazooClient(hosts=zkserver.connect + chroot, timeout=5.0)
    c.start(timeout=10)
    yield c
    c.stop()
    c.close()


@pytest.fixture
def names():
    region = SharedRegion.create(f"/hbtest-rnames-{os.getpid()}-{next(_roots)}",
                                 ReplicatedNames.region_size(64))
    table = ReplicatedNames.create(region, 64)
    yield table
    table.close()
    region.close()
    region.unlink()


def reader(client, names, **bounds):
    worker = SimpleNamespace(client=client, doorbell=SimpleNamespace(ring=lambda: None),
                             connection_ms=5000, stopping=False)
    b = zkread.Bounds.of({f"zookeeper.max.{k}": v for k, v in bounds.items()})
    return ReplicatedTopics(worker, names, b)


def test_hostile_topic_nodes_count_as_replicated_and_old_topics_stay_plain(client, names):
    client.create(replica_nodes.assignment_path("good"),
                  replica_nodes.encode_assignment({0: [1, 2]}),
                  makepath=True)
    client.create("/brokers/topics/old07", b"")  # a 0.7-style topic: no value
    client.create("/brokers/topics/old07/1", b"1")
    client.create("/brokers/topics/garbage", b"{not json")
    client.create("/brokers/topics/deep", b"[" * 5000)
    client.create("/brokers/topics/wrongshape", b'{"version":1,"partitions":{"0":[]}}')
    client.create("/brokers/topics/huge", b"x" * 5000)
    reader(client, names, **{"node.bytes": 1024}).read_and_publish(client)
    for topic in ("good", "garbage", "deep", "wrongshape", "huge"):
        assert names.replicated(topic) is True, topic
    assert names.replicated("old07") is False
    assert names.replicated("never-heard-of") is False


def test_more_topics_than_read_refuse_every_name(client, names):
    for i in range(5):
        client.create(f"/brokers/topics/t{i}", b"", makepath=True)
    reader(client, names, children=3).read_and_publish(client)
    assert names.replicated("t0") is True
    assert names.replicated("anything") is True


def test_no_view_yet_and_a_torn_write_refuse_retriably(names):
    assert names.replicated("x") is None  # the registrar has not published
    names.publish({"a"})
    assert names.replicated("x") is False
    names._u64[2] += 1  # a registrar that died mid-write leaves seq odd
    started = time.monotonic()
    assert names.replicated("x") is None
    assert time.monotonic() - started < 5


def test_a_hash_collision_only_refuses(names, monkeypatch):
    names.publish({"replicated"})
    assert names.replicated("replicated") is True
    # a different name with the same hash counts as replicated too: refused, never allowed
    from hostbroker.shm import topicnames

    monkeypatch.setattr(topicnames, "name_hash", lambda name: name_hash("replicated"))
    assert names.replicated("innocent") is True


def test_more_replicated_names_than_fit_refuse_every_name(names):
    names.publish({f"r{i}" for i in range(65)})
    assert names.replicated("plain") is True


def test_a_deleted_replicated_topic_is_free_again(client, names):
    client.create(replica_nodes.assignment_path("gone"), replica_nodes.encode_assignment({0: [3]}),
                  makepath=True)
    r = reader(client, names)
    r.read_and_publish(client)
    assert names.replicated("gone") is True
    client.delete("/brokers/topics/gone")
    r.read_and_publish(client, full=False)
    assert names.replicated("gone") is False
