import pytest

from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.peers import MAX_PEERS, Peer, PeersTable
from hostbroker.shm.region import LayoutError


@pytest.fixture
def peers(created):
    return created(PeersTable, "peers", 4)


def test_a_new_table_knows_no_controller(peers):
    assert peers.controller_epoch == 0
    assert peers.controller_id == -1
    assert peers.all() == []
    assert peers.get(1) is None
    assert MAX_PEERS == 1024


def test_peers_are_stored_replaced_and_read_by_another_handle(peers, names):
    peers.put(2, "127.0.0.1", 9092, "/tmp/b2.sock")
    peers.put(1, "::1", -1, "")
    peers.put(2, "127.0.0.2", 9093, "")
    other = PeersTable.attach(peers.name)
    try:
        assert other.get(2) == Peer(2, "127.0.0.2", 9093, "")
        assert other.all() == [Peer(1, "::1", -1, ""), Peer(2, "127.0.0.2", 9093, "")]
        peers.set_controller_epoch(7)
        peers.set_controller_id(2)
        assert (other.controller_epoch, other.controller_id) == (7, 2)
    finally:
        other.close()
    peers.remove(1)
    assert [p.broker_id for p in peers.all()] == [2]


def test_a_peer_holds_its_plain_and_its_ssl_listeners(peers):
    # a 253-byte name of each kind and a Unix path fit in one slot
    peers.put(3, "t" * 253, 9092, "/run/" + "u" * 100, "s" * 253, 9093)
    assert peers.get(3) == Peer(3, "t" * 253, 9092, "/run/" + "u" * 100, "s" * 253, 9093)
    peers.put(3, "h", 9092, "")  # (a LEADER_AND_ISR of version 0: no ssl:// listener)
    assert (peers.get(3).ssl_host, peers.get(3).ssl_port) == ("", -1)


def test_out_of_range_values_are_refused_in_one_line(peers):
    with pytest.raises(ValueError, match="broker id"):
        peers.put(-1, "h", 1, "")
    with pytest.raises(ValueError, match="port"):
        peers.put(1, "h", 70000, "")
    with pytest.raises(ValueError, match="port"):
        peers.put(1, "h", 1, "", "s", 70000)
    with pytest.raises(ValueError, match="over 748 bytes"):
        peers.put(1, "h" * 300, 1, "", "s" * 500, 9093)
    with pytest.raises(ValueError, match="controller epoch"):
        peers.set_controller_epoch(-1)
    for b in range(4):
        peers.put(b, "h", 1, "")
    with pytest.raises(ValueError, match="more than 4 peers"):
        peers.put(9, "h", 1, "")
    assert len(peers.all()) == 4


def test_another_layout_is_not_taken_for_a_peers_table(created):
    table = created(PartitionTable, "table", 4)
    with pytest.raises(LayoutError):
        PeersTable.attach(table.name)


def test_what_zookeeper_says_is_published_in_one_word_and_read_by_another_handle(peers):
    assert peers.zk_controller is None
    assert (peers.zk_controller_epoch, peers.zk_controller_id) == (-1, -1)
    other = PeersTable.attach(peers.name)
    try:
        peers.set_zk_controller(2**31 - 1, 2**31 - 1)
        assert other.zk_controller == (2**31 - 1, 2**31 - 1)
        peers.set_zk_controller(5, 3)
        assert (other.zk_controller_epoch, other.zk_controller_id) == (5, 3)
        peers.set_zk_controller(None, None)
        assert other.zk_controller is None
        assert other.unconfirmed == 0
        peers.note_unconfirmed()
        peers.note_unconfirmed()
        assert other.unconfirmed == 2
    finally:
        other.close()
    with pytest.raises(ValueError, match="controller epoch"):
        peers.set_zk_controller(2**31, 1)
    with pytest.raises(ValueError, match="controller id"):
        peers.set_zk_controller(1, -1)
    # the highest epoch seen is a separate word
    assert (peers.controller_epoch, peers.controller_id) == (0, -1)


def test_many_brokers_are_put_with_one_scan_of_the_table(peers, monkeypatch):
    peers.put(1, "old", 1, "")
    scans = []
    scan = peers.scan
    monkeypatch.setattr(peers, "scan", lambda: scans.append(1) or scan())
    # a replacement, three new ones (one past the room left), a bad port, a bad id
    refused = peers.put_all([(1, "new", 2, ""), (2, "h", 1, ""), (3, "h", 1, "/s"),
                             (4, "h", 1, ""), (5, "h", 70000, ""), (-1, "h", 1, ""),
                             (6, "h", 1, "")] + [(7 + i, "h", 1, "") for i in range(5000)])
    assert len(scans) == 1
    assert refused == 5003
    assert peers.all() == [Peer(1, "new", 2, ""), Peer(2, "h", 1, ""), Peer(3, "h", 1, "/s"),
                           Peer(4, "h", 1, "")]
