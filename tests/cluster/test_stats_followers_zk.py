"""A follower's FETCHes count on its leader as a consumer's do (shm/stats.py):
two brokers on a real ZooKeeper, a topic of replication factor 2, a known
produce acknowledged by both (acks=-1); the leader's stats show the messages
in once and the bytes its follower fetched, the follower's show no produced
message (its copies are not produced)."""

from __future__ import annotations

from hostbroker.config import Config
from hostbroker.log.message import encode_message_set
from hostbroker.protocol.api import ApiKey
from hostbroker.shm import stats
from hostbroker.shm.partitions import PartitionTable
from hostbroker.workers.plan import BrokerPlan
from hostbroker.workers.stats_record import attach_stats
from tests.cluster.test_controller import controller, create, start, state
from tests.cluster.test_discovery import wait_until
from tests.cluster.zkfixtures import cluster, zkserver  # noqa: F401 - fixtures


def _counts(broker, topic: str, partition: int) -> tuple[tuple[int, ...], tuple]:
    """(the partition's four counts, FETCH's API figures) of one broker."""
    plan = BrokerPlan.from_config(Config.build(overrides=[
        f"{k}={broker.settings[k]}" for k in ("log.dirs", "broker.id", "zookeeper.connect",
                                               "num.processors", "num.handlers")]))
    partitions, apis = attach_stats(plan, plan.workers())
    table = PartitionTable.attach(plan.table_name, readonly=True)
    try:
        slot = next(i for i, s in table.scan() if (s.name, s.partition) == (topic, partition))
        totals = stats.partition_totals(partitions, slot + 1)
        fetch = stats.merge_api(a.snapshot() for a in apis).get(ApiKey.FETCH, (0, 0, 0, ()))
        return tuple(totals[slot * 4:slot * 4 + 4]), fetch
    finally:
        for handle in partitions + apis + [table]:
            handle.close()


def test_a_followers_fetches_count_on_its_leader(make_broker, tmp_path, cluster):  # noqa: F811
    connect, zk = cluster
    brokers = {i: start(make_broker, tmp_path, connect, zk, i) for i in (1, 2)}
    wait_until(lambda: controller(zk) is not None)
    result = create(connect, "copied", 1, 2)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: (state(zk, "copied", 0) or {}).get("isr") and
               len(state(zk, "copied", 0)["isr"]) == 2, timeout=30)
    leader_id = state(zk, "copied", 0)["leader"]
    leader, follower = brokers[leader_id], brokers[3 - leader_id]
    a_set = encode_message_set([b"r" * 100] * 10)
    with leader.client() as c:
        wait_until(lambda: c.produce("copied", 0, a_set, acks=-1, raise_on_error=False)
                   .error_code == 0, timeout=30)
        for _ in range(2):
            c.produce("copied", 0, a_set, acks=-1)
    # acks=-1 answered: the follower has fetched all three sets from the leader
    wait_until(lambda: _counts(leader, "copied", 0)[0][stats.BYTES_OUT] >= 3 * len(a_set),
               timeout=15)
    (m_in, b_in, b_out, fetches), fetch = _counts(leader, "copied", 0)
    assert (m_in, b_in) == (30, 3 * len(a_set))
    assert b_out >= 3 * len(a_set) and fetches >= 1
    assert fetch[0] >= fetches  # each of them a FETCH request the leader answered
    copied, _ = _counts(follower, "copied", 0)
    assert copied[stats.MESSAGES_IN] == 0 and copied[stats.BYTES_IN] == 0
