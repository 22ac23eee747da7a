"""A cluster broker's log dirs have no id (-1: replicas across log dirs are
standalone only): ``top`` (``--json`` and its table), METADATA version 2 and
``logdirs list`` show each online while its writer serves it, and offline
once its writer cannot use it; on a real broker and a real ZooKeeper."""

from __future__ import annotations

import pytest

from tests.cluster.zkfixtures import zkserver  # noqa: F401 - fixture
from tests.integration.broker import Broker
from tests.integration.logdir_views import (listed_dirs, top_dirs, top_text, unusable,
                                            wire_dirs)


@pytest.fixture
def clustered(tmp_path, zkserver):  # noqa: F811 - the imported fixture
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    broker = Broker(tmp_path, **{"num.processors": 1, "num.handlers": 1, "broker.id": 7,
                                 "zookeeper.connect": zkserver.connect,
                                 "log.dirs": ",".join(dirs)})
    yield broker, dirs
    broker.finish()


def test_a_cluster_brokers_dirs_show_online_and_a_failed_one_offline(clustered):
    broker, dirs = clustered
    with unusable(dirs[1]):
        broker.start()
        assert f"log dir {dirs[1]} is offline" in broker.log()
        expected = [(-1, dirs[0], "online"), (-1, dirs[1], "offline")]
        assert top_dirs(broker) == expected
        assert wire_dirs(broker) == expected
        assert [(r["id"], r["path"], r["state"]) for r in listed_dirs(broker)] == expected
        # (top cuts a long path in the middle, to fit 100 columns)
        table = [line.split() for line in top_text(broker) if line.startswith(dirs[0][:13])]
        assert [(row[0][-3:], row[1], row[2]) for row in table] == [
            (dirs[0][-3:], "-", "online"), (dirs[1][-3:], "-", "offline")]
        assert broker.stop() == 0
