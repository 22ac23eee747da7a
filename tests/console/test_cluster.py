"""The console of a broker in cluster mode, on a real ZooKeeper: the broker page
names every registered broker, reading ZooKeeper at most once per
``BROKERS_TTL_S`` however often it is asked for, and topics and groups read as
on a standalone one."""

from __future__ import annotations

import re
import time

from hostbroker.console.api import BROKERS_TTL_S
from tests.cluster.zkserver import four_letters
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
        # asked for again and again: no ZooKeeper session (a create and a close,
        # two transactions each) per request
        before = _zxid(zookeeper)
        for _ in range(6):
            assert [b["broker_id"] for b in get(console, "/api/broker")["brokers"]] == [1, 2]
        assert _zxid(zookeeper) - before < 4

        with console.client() as c:
            c.create_topic("here", 2)
        end = produce(console, "here", 0, [b"z" * 10] * 5)
        topic = get(console, "/api/topics/here")
        assert [(p["partition"], p["log_end_offset"]) for p in topic["partitions"]] == \
            [(0, end), (1, 0)]

        # ZooKeeper gone: the page still answers, promptly, saying so (once the
        # last read is older than BROKERS_TTL_S), with this broker; the failure is
        # kept as long, so the next pages do not wait for ZooKeeper again
        get(console, "/api/broker")
        zookeeper.stop()
        try:
            time.sleep(BROKERS_TTL_S + 0.5)
            started = time.monotonic()
            page = get(console, "/api/broker")
            assert time.monotonic() - started < 10
            assert page["zookeeper_problem"]
            assert [b["broker_id"] for b in page["brokers"]] == [1]
            for _ in range(3):
                started = time.monotonic()
                assert get(console, "/api/broker")["zookeeper_problem"] == \
                    page["zookeeper_problem"]
                assert time.monotonic() - started < 1.0
            assert get(console, "/api/topics/here")["total"] == 2  # the rest reads on
        finally:
            zookeeper.start()
    finally:
        console.finish()


def _zxid(zookeeper) -> int:
    """ZooKeeper's last transaction id (``srvr``): a session's create and close each move it."""
    found = re.search(r"Zxid: (0x[0-9a-f]+)", four_letters(zookeeper.port))
    assert found, "ZooKeeper did not answer srvr"
    return int(found.group(1), 16)
