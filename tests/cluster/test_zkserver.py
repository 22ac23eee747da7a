"""The test ZooKeeper itself: it answers, keeps data across a restart, and stops by PID."""

from __future__ import annotations

from tests.cluster.zkserver import ZooKeeperServer, four_letters


def test_server_answers_and_keeps_data_across_a_restart(tmp_path, zk, zookeeper):
    zk.create("/kept", b"42", makepath=True)
    zk.stop()
    zookeeper.stop()
    assert four_letters(zookeeper.port) == ""
    zookeeper.start()
    zk.start(timeout=10)
    assert zk.get("/kept")[0] == b"42"


def test_two_servers_on_their_own_ports(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ZooKeeperServer(tmp_path / "a").start()
    b = ZooKeeperServer(tmp_path / "b").start()
    try:
        assert a.port != b.port
        assert "Mode: standalone" in four_letters(a.port)
        assert "Mode: standalone" in four_letters(b.port)
    finally:
        a.stop()
        b.stop()
