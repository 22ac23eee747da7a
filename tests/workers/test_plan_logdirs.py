"""The plan of hb-logdirs: planned only on a standalone broker with two or more
log dirs, with its four ring kinds and a board slot of its own."""

from hostbroker.config import Config
from hostbroker.workers.plan import BrokerPlan


def plan(**settings) -> BrokerPlan:
    return BrokerPlan.from_config(Config.build(overrides=[f"{k}={v}" for k, v in settings.items()]))


def test_planned_only_standalone_with_two_log_dirs_or_more():
    assert plan(**{"log.dirs": "/a,/b"}).logdirs
    assert not plan(**{"log.dirs": "/a"}).logdirs
    assert not plan(**{"log.dirs": "/a,/b", "zookeeper.connect": "127.0.0.1:1"}).logdirs
    one = plan(**{"log.dirs": "/a"})
    assert "logdirs" not in [k for k, _ in one.workers()]
    assert not any(k in ("dctl", "dres", "dreq", "dans") for k, _, _ in one.ring_pairs())


def test_rings_slots_and_start_order():
    p = plan(**{"num.processors": 2, "num.handlers": 3, "log.dirs": "/a,/b,/c"})
    assert sorted(p.rings_consumed_by("logdirs", 0)) == sorted(
        [("dres", w, 0) for w in range(3)] + [("dreq", h, 0) for h in range(3)])
    assert ("dctl", 0, 2) in p.rings_consumed_by("writer", 2)
    assert ("dans", 0, 1) in p.rings_consumed_by("handler", 1)
    assert p.ring_bytes("dres") == p.ring_bytes("dans") <= 1024 * 1024
    slots = [p.board_slot(k, i) for k, i in p.workers()]
    assert sorted(slots) == list(range(p.worker_count))
    kinds = [k for k, _ in p.workers()]
    # after the writers, before handlers and listeners
    assert kinds.index("logdirs") < kinds.index("handler") < kinds.index("acceptor")
    assert p.logdirs_name.startswith(p.shm_prefix)
