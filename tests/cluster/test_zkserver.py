"""The test ZooKeeper itself: it answers, keeps data across a restart, and stops by PID."""

from __future__ import annotations

import pytest

from tests.cluster.zkserver import ZooKeeperServer, four_letters
from tests.ports import taken_port


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


def test_a_first_start_that_finds_its_port_taken_moves_and_a_restart_keeps_it(tmp_path):
    """Another test may bind the port picked for a server before its JVM does."""
    server = ZooKeeperServer(tmp_path)
    taken = server.port
    with taken_port(taken):
        server.start()
        try:
            assert server.port != taken
            assert "Mode: standalone" in four_letters(server.port)
            server.stop()
            moved = server.port
            server.start()  # an outage: the clients know this port now
            assert server.port == moved
        finally:
            server.stop()


def test_a_first_start_whose_port_another_zookeeper_took_moves(tmp_path):
    """The other server answers on the port too: the start waits for its own JVM to
    listen, not for any answer, so it is not taken for this one."""
    (tmp_path / "other").mkdir()
    (tmp_path / "mine").mkdir()
    other = ZooKeeperServer(tmp_path / "other").start()
    server = ZooKeeperServer(tmp_path / "mine")
    server.port = other.port  # as if the kernel had picked it for both
    try:
        server.start()
        assert server.port != other.port and server.proc.poll() is None
        server.suspend()  # this one stopped: the other still answers on its port
        try:
            assert "Mode: standalone" in four_letters(other.port)
            assert four_letters(server.port, timeout=0.5) == ""
        finally:
            server.resume()
    finally:
        server.stop()
        other.stop()


def test_a_given_port_that_is_taken_is_an_error(tmp_path):
    with taken_port() as port:
        server = ZooKeeperServer(tmp_path, port=port)
        with pytest.raises(RuntimeError, match="Address already in use"):
            server.start()
        assert server.port == port
