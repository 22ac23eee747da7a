import os

from hostbroker.config import Config
from hostbroker.workers.plan import BrokerPlan, shm_token


def plan(**settings) -> BrokerPlan:
    return BrokerPlan.from_config(Config.build(overrides=[f"{k}={v}" for k, v in settings.items()]))


def test_one_ring_per_ordered_pair_of_workers_that_talk():
    p = plan(**{"num.processors": 3, "num.handlers": 2, "log.dirs": "/a,/b"})
    pairs = list(p.ring_pairs())
    # processor-handler, handler-writer, writer-processor pairs, the coordinator's, then
    # hb-logdirs' (two log dirs): with every writer and every handler
    assert len(pairs) == len(set(pairs)) == (3 * 2 * 2 + 2 * 2 * 2 + 2 * 3 * 2 + 2 * 2 + 3 * 2
                                             + 2 * 2 + 2 * 2)
    assert len({p.ring_name(*x) for x in pairs}) == len(pairs)
    # a handler consumes request rings from every processor and result rings from
    # every writer and the coordinator
    assert sorted(p.rings_consumed_by("handler", 1)) == sorted(
        [("req", proc, 1) for proc in range(3)] + [("res", w, 1) for w in range(2)]
        + [("cres", 0, 1), ("dans", 0, 1)])
    # a writer: appends from every handler, PUTs from every processor, hb-logdirs' orders
    assert sorted(p.rings_consumed_by("writer", 0)) == [("app", 0, 0), ("app", 1, 0)] + [
        ("dctl", 0, 0)] + [("put", proc, 0) for proc in range(3)]
    # a processor: answers from every handler, and from every writer (direct answers)
    # and the coordinator (GROUP_PUT answers)
    assert sorted(p.rings_consumed_by("processor", 2)) == sorted(
        [("resp", h, 2) for h in range(2)] + [("ans", w, 2) for w in range(2)]
        + [("cans", 0, 2)])
    # the coordinator: group and offset ops from every handler, GROUP_PUTs from every
    # processor; it is the peer after the last writer in their lists
    assert sorted(p.rings_consumed_by("coordinator", 0)) == sorted(
        [("capp", h, 0) for h in range(2)] + [("cput", proc, 0) for proc in range(3)])
    assert p.coordinator_peer == 2
    assert list(p.rings_consumed_by("acceptor", 0)) == []


def test_answer_and_put_rings_are_small_and_the_rest_ring_bytes():
    p = plan(**{"ring.bytes": 64 * 1024 * 1024})
    assert p.ring_bytes("req") == p.ring_bytes("app") == 64 * 1024 * 1024
    assert p.ring_bytes("ans") == p.ring_bytes("cans") == 1024 * 1024
    assert p.ring_bytes("put") == p.ring_bytes("cput") == 4 * 1024 * 1024
    assert p.ring_bytes("capp") == p.ring_bytes("cres") == 64 * 1024 * 1024
    small = plan(**{"ring.bytes": 65536})
    assert small.ring_bytes("ans") == small.ring_bytes("put") == 65536


def test_board_slots_are_distinct_and_dense():
    p = plan(**{"num.processors": 2, "num.handlers": 3, "log.dirs": "/a,/b"})
    slots = [p.board_slot(k, i) for k, i in p.workers()]
    assert sorted(slots) == list(range(p.worker_count))
    # writers start first, with the coordinator
    assert [k for k, _ in p.workers()][:3] == ["writer", "writer", "coordinator"]
    assert [k for k, _ in p.workers()].count("coordinator") == 1
    clustered = plan(**{"zookeeper.connect": "127.0.0.1:1"})
    slots = [clustered.board_slot(k, i) for k, i in clustered.workers()]
    assert sorted(slots) == list(range(clustered.worker_count))


def test_connections_spread_over_handlers_and_stick():
    p = plan(**{"num.handlers": 4})
    seen = {p.handler_for(conn) for conn in range(1000)}
    assert seen == {0, 1, 2, 3}
    assert all(p.handler_for(c) == p.handler_for(c) for c in range(100))


def test_shm_token_is_stable_per_broker_and_differs_between_brokers():
    a = shm_token(Config.build(overrides=["log.dirs=/x"]))
    assert a == shm_token(Config.build(overrides=["log.dirs=/x"]))
    assert a != shm_token(Config.build(overrides=["log.dirs=/y"]))
    assert a != shm_token(Config.build(overrides=["log.dirs=/x", "broker.id=1"]))
    assert plan(**{"log.dirs": "rel"}).log_dirs == [os.path.abspath("rel")]
