"""The follower fetcher in the broker plan (hostbroker/workers/plan.py): one
``hb-replica`` in cluster mode, none standalone, with a ring pair to each writer."""

from hostbroker.config import Config
from hostbroker.workers.plan import BrokerPlan


def plan(**settings) -> BrokerPlan:
    return BrokerPlan.from_config(Config.build(overrides=[f"{k}={v}" for k, v in settings.items()]))


def test_cluster_mode_plans_one_replica_between_the_writers_and_the_handlers():
    p = plan(**{"zookeeper.connect": "127.0.0.1:1", "log.dirs": "/a,/b", "num.handlers": 2})
    kinds = [k for k, _ in p.workers()]
    assert kinds.count("replica") == 1
    assert kinds.index("replica") > kinds.index("coordinator")
    assert kinds.index("replica") < kinds.index("handler")
    slots = [p.board_slot(k, i) for k, i in p.workers()]
    assert sorted(slots) == list(range(p.worker_count))
    # appends and truncations to each writer, their results back
    assert sorted(p.rings_consumed_by("replica", 0)) == [("rres", 0, 0), ("rres", 1, 0)]
    assert ("rapp", 0, 1) in p.rings_consumed_by("writer", 1)
    assert p.ring_bytes("rres") == 1024 * 1024
    assert p.peers_name.startswith(p.shm_prefix) and p.isr_commits_name.startswith(p.shm_prefix)


def test_standalone_has_no_replica_and_no_replica_rings():
    p = plan()
    assert "replica" not in [k for k, _ in p.workers()]
    assert not [r for r in p.ring_pairs() if r[0] in ("rapp", "rres")]
