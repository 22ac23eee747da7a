"""The follower fetcher's own process, ``hb-replica``
(hostbroker/workers/replication/): one per broker in cluster mode and none
standalone, ``hostbroker top`` shows it, its shared memory (the rings to and
from each writer, the peers and ISR commit tables) lives and goes with the
broker, and it dies and comes back alone."""

from __future__ import annotations

import glob
import signal

import psutil
import pytest

from hostbroker.config import Config
from hostbroker.log.message import encode_message_set
from hostbroker.top import attach, sample
from hostbroker.workers.plan import BrokerPlan
from tests.cluster.zkfixtures import zkserver  # noqa: F401 - fixture
from tests.integration.broker import Broker

LEAN = {"num.processors": 1, "num.handlers": 1}


@pytest.fixture
def clustered(tmp_path, zkserver):  # noqa: F811 - the imported fixture
    broker = Broker(tmp_path, **{**LEAN, "zookeeper.connect": zkserver.connect,
                                 "broker.id": 7, "log.dirs": f"{tmp_path}/a,{tmp_path}/b"})
    broker.start()
    yield broker
    broker.finish()


def _plan(broker) -> BrokerPlan:
    return BrokerPlan.from_config(Config.build(overrides=[
        f"{k}={broker.settings[k]}" for k in ("log.dirs", "broker.id", "zookeeper.connect")]))


def _rows(broker) -> list[dict]:
    board, table, log_dirs = attach(Config.build(overrides=[
        f"log.dirs={broker.settings['log.dirs']}", f"broker.id={broker.settings['broker.id']}"]))
    try:
        return sample(board, {}, table, log_dirs)["workers"]
    finally:
        board.close()
        table.close()


def test_one_replica_process_in_cluster_mode_and_top_shows_it(clustered):
    names = clustered.workers()
    assert "hb-replica" in names
    assert psutil.Process(names["hb-replica"]).ppid() == clustered.proc.pid
    replicas = [r for r in _rows(clustered) if r["kind"] == "replica"]
    assert len(replicas) == 1
    assert replicas[0]["name"] == "hb-replica"
    assert replicas[0]["pid"] == names["hb-replica"]
    assert replicas[0]["state"] == "ready"


def test_its_shared_memory_lives_and_goes_with_the_broker(clustered):
    plan = _plan(clustered)
    expected = {plan.peers_name, plan.isr_commits_name} | {
        plan.ring_name(kind, producer, consumer) for kind, producer, consumer in plan.ring_pairs()
        if kind in ("rapp", "rres")}
    assert len(expected) == 2 + 2 * 2  # two writers: a ring pair each
    present = {"/" + path.rsplit("/", 1)[1] for path in glob.glob(f"/dev/shm{plan.shm_prefix}*")}
    assert expected <= present
    assert clustered.stop() == 0
    assert not glob.glob(f"/dev/shm{plan.shm_prefix}*")


def test_a_killed_replica_process_is_replaced_alone(clustered):
    before = clustered.workers()
    old = before["hb-replica"]
    psutil.Process(old).send_signal(signal.SIGKILL)
    new = clustered.wait_worker_replaced("hb-replica", old)
    after = clustered.workers()
    assert {n: p for n, p in after.items() if n != "hb-replica"} == {
        n: p for n, p in before.items() if n != "hb-replica"}
    assert psutil.Process(new).ppid() == clustered.proc.pid
    assert "replica 0 (pid" in clustered.log() and "replacing it" in clustered.log()
    # the broker serves on meanwhile
    with clustered.client(clustered.tcp) as client:
        client.create_topic("plain", 1)
        client.produce("plain", 0, encode_message_set([b"x"]))
        assert client.fetch("plain", 0, 0, 1 << 16).error_code == 0


def test_no_replica_process_standalone(tmp_path):
    broker = Broker(tmp_path, **LEAN).start()
    try:
        assert "hb-replica" not in broker.workers()
        plan = BrokerPlan.from_config(Config.build(overrides=[
            f"log.dirs={broker.settings['log.dirs']}"]))
        assert not [r for r in plan.ring_pairs() if r[0] in ("rapp", "rres")]
    finally:
        broker.stop()
