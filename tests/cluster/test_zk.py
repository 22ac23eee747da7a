"""zookeeper.connect strings and the layout's values, and a client on a real ZooKeeper."""

from __future__ import annotations

import pytest

from hostbroker.cluster import paths
from hostbroker.cluster.zk import ZooKeeperUnavailable, make_client
from tests.cluster.zkserver import free_port


def test_values_round_trip_and_bad_ones_name_their_path():
    info = paths.BrokerInfo(3, "127.0.0.1", 9092, "/run/hb.sock")
    assert paths.decode_broker(3, paths.encode_broker(info)) == info
    assert info.uris() == ["unix:///run/hb.sock", "tcp://127.0.0.1:9092"]
    assert paths.parse_partition_name(paths.partition_name(2, 7)) == (2, 7)
    assert paths.decode_owner(paths.encode_owner("host:uuid-a-b", 3), "/o") == ("host:uuid-a-b", 3)
    assert paths.decode_subscription(paths.encode_subscription({"b": 2, "a": 1}), "/s") == \
        {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="/brokers/ids/3: names no listener"):
        paths.decode_broker(3, b'{"version":1,"host":null,"port":null,"unix":null}')
    with pytest.raises(ValueError, match="/x: 'twelve' is not a decimal"):
        paths.decode_count(b"twelve", "/x")
    with pytest.raises(ValueError, match="is not a broker_id-partition"):
        paths.parse_partition_name("3_1")


def test_client_with_chroot_on_a_real_server(zookeeper, zk):
    client = make_client(zookeeper.connect + "/cluster/a", 4000, 5000)
    try:
        client.create("/brokers/ids/1", b"x", makepath=True)
    finally:
        client.stop()
        client.close()
    assert zk.exists("/cluster/a/brokers/ids/1")


def test_no_server_is_one_line():
    with pytest.raises(ZooKeeperUnavailable, match=r"no ZooKeeper server of 127.0.0.1:\d+ "
                                                   r"answered within 500 ms"):
        make_client(f"127.0.0.1:{free_port()}", 4000, 500)
