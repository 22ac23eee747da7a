"""Where a follower connects to its leader (hostbroker/workers/replication/fetcher.py,
``endpoint``): the leader's Unix socket when it is on this host, else TCP; a path
that is there but is no socket (a file an attacker put at the advertised path, or
another host's path that happens to exist here) is not connected to."""

import socket

from hostbroker.shm.peers import Peer
from hostbroker.workers.replication.fetcher import endpoint


def test_the_unix_socket_when_it_is_on_this_host(tmp_path):
    path = str(tmp_path / "leader.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    try:
        assert endpoint(Peer(1, "127.0.0.1", 9092, path)) == ("unix", path)
    finally:
        server.close()


def test_tcp_when_the_path_is_missing_or_no_socket(tmp_path):
    plain = tmp_path / "not-a-socket"
    plain.write_text("x")
    for unix in ("", str(tmp_path / "missing.sock"), str(plain), "bad\0path"):
        assert endpoint(Peer(1, "127.0.0.1", 9092, unix)) == ("tcp", "127.0.0.1", 9092)


def test_no_endpoint_without_a_usable_listener():
    assert endpoint(None) is None
    assert endpoint(Peer(1, "", 9092, "")) is None
    assert endpoint(Peer(1, "127.0.0.1", -1, "")) is None
    assert endpoint(Peer(1, "127.0.0.1", 0, "")) is None
