"""``hostbroker topics create --bootstrap URI --replication-factor R`` sent to a broker in
cluster mode, for real: a broker of two log dirs registered in a real ZooKeeper.

Replicas across log dirs are a standalone broker's; a cluster's replicated topics are
made with ``--zookeeper`` (docs/tools.md, "Replicas across log dirs"). So the broker
refuses R >= 2 in one line (INVALID_REQUEST) and makes nothing, neither on its dirs nor
in ZooKeeper; R = 1 there is a plain topic of that broker, as before."""

from __future__ import annotations

import os

from hostbroker.cluster import paths
from hostbroker.cluster import replica_nodes
from tests.cluster.test_broker_registration import cluster_broker
from tests.integration.cli import hostbroker, lines, one_line_error

REFUSAL = ("hostbroker topics create: broker error: INVALID_REQUEST: a cluster broker's "
           "replicated topics are created with --zookeeper")


def test_a_cluster_broker_refuses_local_replicas_in_one_line(make_broker, tmp_path,
                                                             zookeeper, zk):
    root = tmp_path / "b1"
    dirs = [str(root / "d0"), str(root / "d1")]  # enough dirs: the refusal is not about them
    broker = cluster_broker(make_broker, tmp_path, zookeeper, zk, 1,
                            **{"log.dirs": ",".join(dirs)})
    b = ("--bootstrap", broker.tcp)
    for rf in ("2", "3"):
        refused = hostbroker("topics", "create", *b, "--topic", "wide", "--partitions", "2",
                             "--replication-factor", rf)
        assert refused.returncode == 1, refused
        assert one_line_error(refused) == REFUSAL
        assert refused.stdout == b""

    # nothing made: no topic on the broker, no partition dir, nothing in ZooKeeper
    assert "wide" not in lines(hostbroker("topics", "list", *b))
    assert not [n for d in dirs for n in os.listdir(d) if n.startswith("wide")]
    assert zk.exists(replica_nodes.assignment_path("wide")) is None
    assert zk.exists(paths.topic_path("wide")) is None
    assert zk.exists(replica_nodes.topic_config_path("wide")) is None

    # the plain topic of that broker is still what R = 1 makes
    plain = hostbroker("topics", "create", *b, "--topic", "wide", "--replication-factor", "1")
    assert plain.returncode == 0, plain.stderr
    assert lines(plain) == ["created topic wide with 1 partition, replication factor 1"]
    assert "wide" in lines(hostbroker("topics", "list", *b))
