"""The group coordinator's count of a replicated topic that grows (cluster mode).

A topic grown from 2 to 5 partitions: this broker's writers claim its new
replicas (here 2 and 3, not 4) before the registrar has read the grown
assignment. The replicas held here are a part of the topic; a rebalance on
them dealt (0, 1, 2, 3) and a second one followed when the registrar published
5. The coordinator takes a replicated topic's count from the registrar's whole
list only, and falls back to its own replicas when that list cannot give it
(none published, INCOMPLETE, the topic listed with no count).

Real shared memory (partition table, published names) and a real coordinator
state (its ``__groups.log`` in a temporary directory).
"""

from __future__ import annotations

import pytest

from hostbroker.config import Config
from hostbroker.coordinator.state import GroupPhase
from hostbroker.shm.partitions import ONLINE, PLACEMENT_LOG_DIRS
from hostbroker.workers.coordinator.groups import GroupHost
from tests.hostile.test_replicated_counts import names, table  # noqa: F401 - fixtures


@pytest.fixture
def groups(table, names, tmp_path):
    host = GroupHost(Config.build(), table, str(tmp_path), 1, replacement=False, names=names)
    yield host
    host.close()


def replica(table, slot: int, topic: str, partition: int, **fields) -> None:
    """This broker holds a replica of ``topic`` ``partition`` (claimed as the admin does)."""
    table.claim_replica(slot, [1, 2], state=ONLINE, name=topic, partition=partition,
                        owner=0, **fields)
    table.bump_generation()


def join(groups: GroupHost, member: str = "") -> tuple[str, int]:
    answer = groups.handle(0, 1, {"op": "join", "group": "g", "member_id": member,
                                  "client_id": "c", "session_timeout_ms": 30000,
                                  "rebalance_timeout_ms": 5000, "topics": {"grow": 1}})
    assert answer is not None and answer["error"] == 0, answer
    return answer["member_id"], answer["generation"]


def dealt(groups: GroupHost, member: str, generation: int) -> list[int]:
    answer = groups.handle(0, 2, {"op": "sync", "group": "g", "generation": generation,
                                  "member_id": member})
    assert answer["error"] == 0, answer
    return [p for topic, _, parts in answer["assignment"] if topic == "grow" for p in parts]


def test_a_grown_topic_is_dealt_by_the_registrars_count_not_the_replicas_held(groups, table,
                                                                               names):
    names.publish({"other": 3})  # the registrar's whole list, before it read the new topic
    replica(table, 0, "grow", 0)
    replica(table, 1, "grow", 1)
    member, generation = join(groups)
    assert dealt(groups, member, generation) == []  # no count known: nothing yet
    # grown to 5: the writers claim replicas of 2 and 3 here before the registrar reads
    replica(table, 2, "grow", 2)
    replica(table, 3, "grow", 3)
    groups.tick()
    assert "grow" not in groups.state.partitions
    assert groups.state.groups["g"].phase is GroupPhase.STABLE  # no rebalance on a part
    names.publish({"other": 3, "grow": 5})
    groups.tick()
    assert groups.state.groups["g"].phase is GroupPhase.PREPARING_REBALANCE
    member, generation = join(groups, member)
    assert dealt(groups, member, generation) == [0, 1, 2, 3, 4]
    # counted by the list from now on: a replica more held here changes nothing
    replica(table, 4, "grow", 4)
    groups.tick()
    assert groups.state.groups["g"].phase is GroupPhase.STABLE


def test_a_new_replicated_topic_waits_for_the_registrars_whole_list(groups, table, names):
    names.publish({"other": 3})  # a whole list the new topic is not in yet
    replica(table, 0, "grow", 1)
    member, generation = join(groups)
    assert dealt(groups, member, generation) == []
    names.publish({"other": 3, "grow": 2})
    groups.tick()
    member, generation = join(groups, member)
    assert dealt(groups, member, generation) == [0, 1]


def test_own_replicas_count_when_the_list_cannot_give_the_count(groups, table, names):
    replica(table, 0, "grow", 2)
    groups.tick()
    assert groups.state.partitions == {"grow": 3}  # no list published (yet): the table's
    names.publish({"grow": 0})  # listed, its node unreadable: no count
    groups.tick()
    assert groups.state.partitions == {"grow": 3}
    names.publish({f"t{i}": 1 for i in range(9)})  # over the capacity: INCOMPLETE
    groups.tick()
    assert groups.state.partitions["grow"] == 3
    # a replica across this broker's log dirs is no topic of ZooKeeper: always counted
    names.publish({"other": 1})
    replica(table, 1, "dirs", 4, placement=PLACEMENT_LOG_DIRS)
    groups.tick()
    assert groups.state.partitions == {"other": 1, "dirs": 5}


def test_a_topic_waiting_long_for_the_registrars_list_is_said_once(groups, table, names,
                                                                   capsys):
    from hostbroker.workers.coordinator.groups import UNLISTED_SAY_MS

    names.publish({"other": 3})  # a whole list; the registrar then publishes nothing more
    replica(table, 0, "stuck", 0)
    groups._partition_counts(1000.0)
    groups._partition_counts(1000.0 + UNLISTED_SAY_MS - 1)
    assert "stuck" not in capsys.readouterr().err  # not yet
    groups._partition_counts(1000.0 + UNLISTED_SAY_MS)
    said = capsys.readouterr().err
    assert "replicated topic 'stuck' held here is not in the registrar's list" in said
    groups._partition_counts(1000.0 + 3 * UNLISTED_SAY_MS)
    assert capsys.readouterr().err == ""  # once
    names.publish({"other": 3, "stuck": 1})
    groups._partition_counts(1000.0 + 4 * UNLISTED_SAY_MS)
    assert groups.state.partitions["stuck"] == 1 and groups.unlisted == {}
