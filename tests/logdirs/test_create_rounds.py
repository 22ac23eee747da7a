"""A topic of many partitions made a few replicas per round of ``hb-logdirs``
(``logdirs.create.round.ms`` 1 ms: a round holds one or two replicas): the
create is answered once it is all made, every partition led with its full
ISR and in the state file, and a second create of the same name meanwhile or
after is refused; auto-creation asks again while it runs and gets one topic."""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.cli import hostbroker
from tests.logdirs.support import AckedLog, assert_all_acked, create, read_back, replica_slots

PARTITIONS = 96


@pytest.fixture(scope="module")
def broker(dirs_broker):
    return dirs_broker(2, **{"logdirs.create.round.ms": 1, "default.replication.factor": 2,
                             "num.partitions": PARTITIONS})


def test_a_large_creation_is_answered_once_it_is_all_made(broker):
    create(broker, "big", PARTITIONS, 2)  # (answered, then every partition settled)
    with open(os.path.join(broker.dirs[0], "log-dirs-state")) as f:
        state = json.load(f)
    assert sorted(map(int, state["topics"]["big"]["partitions"])) == list(range(PARTITIONS))
    done = hostbroker("topics", "create", "--bootstrap", broker.unix, "--topic", "big",
                      "--partitions", 1, "--replication-factor", 2)
    assert done.returncode != 0 and b"already exists" in done.stderr, done.stderr


def test_an_auto_created_topic_of_many_partitions_is_made_once(broker):
    log = AckedLog(broker, "auto", PARTITIONS, max_bytes=50_000)
    log.start()
    log.wait_acked(200, timeout=60)
    log.stop()
    for p in range(PARTITIONS):
        assert len(replica_slots(broker, "auto", p)) == 2
    assert_all_acked(log, read_back(broker, "auto"))
