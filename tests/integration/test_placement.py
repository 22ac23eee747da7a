"""New partitions go to the log dir (disk) holding the fewest partitions."""

from collections import Counter


def test_partitions_go_to_the_log_dir_with_the_fewest(make_broker, tmp_path):
    dirs = [str(tmp_path / f"disk{i}") for i in range(3)]
    broker = make_broker(**{"log.dirs": ",".join(dirs)})
    with broker.client() as c:
        c.create_topic("a", 4)
        placed = {p.partition: p.log_dir for p in c.metadata(["a"]).topics[0].partitions}
        assert Counter(placed.values()) == {dirs[0]: 2, dirs[1]: 1, dirs[2]: 1}
        c.create_topic("b", 2)  # disk0 holds the most: both go elsewhere
        b_dirs = sorted(p.log_dir for p in c.metadata(["b"]).topics[0].partitions)
        assert b_dirs == [dirs[1], dirs[2]]
        c.create_topic("c", 3)  # now 2/2/2: one each
        c_dirs = sorted(p.log_dir for p in c.metadata(["c"]).topics[0].partitions)
        assert c_dirs == dirs
    # each writer owns its disk: writes of every topic landed in their own dir
    for name in ("a", "b", "c"):
        with broker.client() as c:
            for p in c.metadata([name]).topics[0].partitions:
                r = c.produce(name, p.partition, b"\x00\x00\x00\x06\x01\x00\x00\x00\x00\x00")
                assert r.error_code == 0
    # writers, the coordinator, handlers, processors, acceptor, hb-logdirs (3 log dirs)
    assert len(broker.workers()) == 3 + 1 + 2 + 2 + 1 + 1
