"""The console of a broker in cluster mode, on a real ZooKeeper: the broker page
names every registered broker, and topics and groups read as on a standalone one."""

from __future__ import annotations

import time

from tests.cluster.conftest import zk, zookeeper  # noqa: F401 - fixtures
from tests.cluster.test_broker_registration import LEAN, cluster_broker
from tests.console.web import ConsoleBroker, get, produce
from tests.integration.conftest import make_broker  # noqa: F401 - fixture


def test_every_registered_broker_is_shown(make_broker, tmp_path, zookeeper, zk):  # noqa: F811
    root = tmp_path / "console"
    root.mkdir()
    console = ConsoleBroker(root, **{**LEAN, "zookeeper.connect": zookeeper.connect,
                                     "broker.id": 1})
    try:
        console.start()
        cluster_broker(make_broker, tmp_path, zookeeper, zk, 2)
        deadline = time.monotonic() + 30
        while True:
            page = get(console, "/api/broker")
            if [b["broker_id"] for b in page["brokers"]] == [1, 2] or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert page["mode"] == "cluster" and page["broker_id"] == 1
        assert [(b["broker_id"], b["self"], b["state"]) for b in page["brokers"]] == \
            [(1, True, "live"), (2, False, "live")]
        with console.client() as c:
            c.create_topic("here", 2)
        end = produce(console, "here", 0, [b"z" * 10] * 5)
        topic = get(console, "/api/topics/here")
        assert [(p["partition"], p["log_end_offset"]) for p in topic["partitions"]] == \
            [(0, end), (1, 0)]

        # ZooKeeper gone: the page still answers, promptly, saying so, with this broker
        zookeeper.stop()
        try:
            started = time.monotonic()
            page = get(console, "/api/broker")
            assert time.monotonic() - started < 10
            assert page["zookeeper_problem"]
            assert [b["broker_id"] for b in page["brokers"]] == [1]
            assert get(console, "/api/topics/here")["total"] == 2  # the rest reads on
        finally:
            zookeeper.start()
    finally:
        try:
            console.stop(timeout=20)
        except Exception:  # noqa: BLE001 - already failing; leave nothing behind
            console.kill_tree()
        console.remove_leftovers()
