"""A real broker on three log dirs: a dir-placed topic deleted and created again
under the same name lands in the same slots and dirs, and is given its roles
again (hb-logdirs forgets what it told a replica once the replica is deleted):
an acks=-1 produce to it is acknowledged and reads back."""

from __future__ import annotations

import os

import pytest

from hostbroker.log.message import encode_message_set
from tests.integration.broker import Broker
from tests.logdirs.support import SETTINGS, create, poll, read_back, replica_slots


@pytest.fixture
def broker(tmp_path):
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    for d in dirs:
        os.mkdir(d)
    b = Broker(tmp_path, **{**SETTINGS, "log.dirs": ",".join(dirs)})
    b.dirs = dirs
    b.start()
    try:
        yield b
    finally:
        b.stop()
        b.remove_leftovers()


def test_a_topic_deleted_and_created_again_gets_its_roles(broker):
    create(broker, "again", 1, 2)
    first = sorted(i for i, _ in replica_slots(broker, "again", 0))
    with broker.client() as c:
        c.produce("again", 0, encode_message_set([b"first"]), acks=-1)
        c.delete_topic("again")
    poll(lambda: not replica_slots(broker, "again", 0) and not any(
        os.path.exists(os.path.join(d, "again_0")) for d in broker.dirs), 15, "again deleted")

    def created() -> bool:
        try:
            create(broker, "again", 1, 2)  # (refused while the old one is being dropped)
        except AssertionError as e:
            if "already exists" in str(e):
                return False
            raise
        return True

    poll(created, 15, "again created again")
    assert sorted(i for i, _ in replica_slots(broker, "again", 0)) == first  # the same slots
    with broker.client() as c:
        c.produce("again", 0, encode_message_set([b"second"]), acks=-1)
    assert read_back(broker, "again") == {0: [b"second"]}
