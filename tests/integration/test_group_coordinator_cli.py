"""``hostbroker consume --group`` and ``hostbroker mirror`` as several processes of one
group on a standalone broker: the broker's group coordinator splits the partitions
between them (docs/spec/groups.md).

The tests share one module broker (``served``), each with its own topic and group names;
the mirror test's destination is its own (a second broker). The groups-list test keeps its
own broker: it asserts the broker's whole list of groups."""

from __future__ import annotations

import json
import re

from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.log.message import encode_message_set
from tests.cluster.e2e_support import poll
from tests.integration.cli import hostbroker, lines, running, terminate
from tests.integration.test_cli_mirror import _partitions
from tests.integration.wire_helpers import module_broker, new_topic

SETTLE_S = 20.0

served = module_broker()


def described(uri: str, group: str) -> tuple[str, list[list[int]]]:
    """The group's phase and each member's partitions (sorted by member id)."""
    client = CoordinatorClient([uri], timeout=10, client_id="test")
    try:
        answer = client.describe_group(group)
    finally:
        client.close()
    return answer.phase, [sorted(p for s in m.assignment for p in s.partitions)
                          for m in answer.members]


def split(uri: str, group: str, members: int) -> bool:
    phase, held = described(uri, group)
    return phase == "STABLE" and len(held) == members and all(held)


def produce(uri: str, topic: str, partitions: int, per_partition: int, first: int) -> list[str]:
    """``per_partition`` values to each partition, numbered from ``first``."""
    from hostbroker.client import SimpleClient

    values = []
    with SimpleClient(uri) as client:
        for p in range(partitions):
            mine = [f"{first + p * per_partition + i:05d}" for i in range(per_partition)]
            client.produce(topic, p, encode_message_set([v.encode() for v in mine]))
            values += mine
    return values


def test_consumers_of_one_group_split_the_partitions(served):
    broker = served
    topic, group = new_topic("c"), new_topic("cg")
    with broker.client() as client:
        client.create_topic(topic, 4)
    args = ("consume", "--topic", topic, "--group", group, "--from-beginning",
            "--max-messages", "20", "--bootstrap", broker.unix)
    with running(*args) as one, running(*args) as two:
        poll(lambda: split(broker.unix, group, 2), SETTLE_S, "two members with 2 partitions each")
        values = produce(broker.unix, topic, 4, 10, 0)
        out_one, err_one = one.communicate(timeout=60)
        out_two, err_two = two.communicate(timeout=60)
    assert one.returncode == two.returncode == 0, (err_one, err_two)
    got_one, got_two = out_one.decode().split(), out_two.decode().split()
    # Each read two whole partitions: 20 messages, none the other's.
    assert len(got_one) == len(got_two) == 20
    assert sorted(got_one + got_two) == values
    with broker.client() as client:
        stored = client.offset_fetch(group, [(topic, p) for p in range(4)])
        ends = [client.offsets(topic, p)[0] for p in range(4)]
    assert [r.offset for r in stored] == ends


def test_mirrors_of_one_group_copy_each_message_once(served, make_broker):
    source = served
    destination = make_broker()
    topic, group = new_topic("m"), new_topic("mg")
    with source.client() as client:
        client.create_topic(topic, 4)
    values = produce(source.unix, topic, 4, 10, 0)

    def copied() -> list[str]:
        found = _partitions(destination.unix, topic)
        return sorted(v.decode() for vs in found.values() for v in vs) if found else []

    args = ("mirror", "--from", source.unix, "--to", destination.unix, "--topics", topic,
            "--group", group, "--commit-interval-ms", "200")
    with running(*args) as first:
        poll(lambda: copied() == values, SETTLE_S, "the first mirror to copy")
        with running(*args) as second:
            poll(lambda: split(source.unix, group, 2), SETTLE_S, "the mirrors to split")
            values += produce(source.unix, topic, 4, 10, 100)
            poll(lambda: copied() == sorted(values), SETTLE_S, "the two mirrors to copy")
            out_first, err_first = terminate(first)
            poll(lambda: described(source.unix, group)[1] == [[0, 1, 2, 3]], SETTLE_S,
                 "the second mirror to take every partition")
            values += produce(source.unix, topic, 4, 10, 200)
            poll(lambda: copied() == sorted(values), SETTLE_S, "the second mirror to copy")
            out_second, err_second = terminate(second)
    assert first.returncode == second.returncode == 0, (err_first, err_second)
    counts = [int(re.match(rb"mirrored (\d+) message", out).group(1))
              for out in (out_first, out_second)]
    # Every message once: each mirror committed what it copied before giving it up.
    assert sum(counts) == len(values) == 120, counts
    assert counts[1] > 0
    assert copied() == sorted(values)


def test_groups_describe_shows_members_generation_owners_and_lag(served):
    from hostbroker.client import ConsumerConnector

    broker = served
    topic, group = new_topic("d"), new_topic("dg")
    with broker.client() as client:
        client.create_topic(topic, 4)
    values = produce(broker.unix, topic, 4, 3, 0)
    config = {"group.id": group, "auto.offset.reset": "earliest", "consumer.timeout.ms": 10000,
              "fetch.wait.max.ms": 50}
    with ConsumerConnector(broker.unix, config, client_id="one") as one, \
            ConsumerConnector(broker.unix, config, client_id="two") as two:
        (first,) = one.create_message_streams({topic: 1})[topic]
        two.create_message_streams({topic: 1})
        poll(lambda: split(broker.unix, group, 2), SETTLE_S, "two members")
        # Read and commit all of one member's partitions: no lag there.
        taken = [next(first).value.decode() for _ in range(6)]
        one.commit_offsets()
        result = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", group,
                            "--topic", topic)
        as_json = json.loads(hostbroker("groups", "describe", "--bootstrap", broker.unix,
                                        "--group", group, "--topic", topic, "--json").stdout)
    assert result.returncode == 0, result.stderr
    members = sorted([one.cluster.member.member_id, two.cluster.member.member_id])
    generation = as_json["generation"]
    out = lines(result)
    assert out[0] == (f"group: {group}  generation {generation}, STABLE, 2 members  "
                      f"(offsets kept by the broker at {broker.unix})")
    clients = {one.cluster.member.member_id: "one", two.cluster.member.member_id: "two"}
    assert out[1:3] == [f"  {m}  client {clients[m]}  session 6000 ms  partitions per stream: "
                        f"{topic} 0: 2" for m in members]
    assert out[3].split() == ["topic", "partition", "owner", "committed", "log", "end", "lag"]
    with broker.client() as client:
        ends = [client.offsets(topic, p)[0] for p in range(4)]
    mine = sorted({values.index(v) // 3 for v in taken})
    rows = [line.split() for line in out[4:]]
    assert [row[:3] for row in rows] == [[topic, str(p), f"{members[p // 2]}-0"] for p in range(4)]
    assert [row[3:] for row in rows if int(row[1]) in mine] == [
        [str(ends[p]), str(ends[p]), "0"] for p in mine]
    assert [m["member_id"] for m in as_json["members"]] == members
    assert as_json["phase"] == "STABLE"
    assert [m["assignment"] for m in as_json["members"]] == [
        [{"topic": topic, "stream": 0, "partitions": [0, 1]}],
        [{"topic": topic, "stream": 0, "partitions": [2, 3]}]]


def test_a_consumer_joining_takes_partitions_where_the_first_stopped_printing(served):
    import threading

    broker = served
    topic, group = new_topic("j"), new_topic("jg")
    with broker.client() as client:
        client.create_topic(topic, 4)
    values = produce(broker.unix, topic, 4, 5, 0)
    args = ("consume", "--topic", topic, "--group", group, "--from-beginning",
            "--bootstrap", broker.unix)
    printed: list[str] = []
    with running(*args, "--max-messages", "30") as first:
        reader = threading.Thread(
            target=lambda: printed.extend(line.decode().strip() for line in first.stdout))
        reader.start()
        poll(lambda: len(printed) == 20, SETTLE_S, "the first to print the first 20")
        with running(*args, "--max-messages", "10") as second:
            poll(lambda: split(broker.unix, group, 2), SETTLE_S, "the second to join")
            values += produce(broker.unix, topic, 4, 5, 100)
            out_second, err_second = second.communicate(timeout=60)
        first.wait(60)
        reader.join(10)
    assert (first.returncode, second.returncode) == (0, 0), err_second
    # The first printed its 20, then 10 of its two partitions; the second 10 of the
    # other two: nothing twice.
    assert sorted(printed + out_second.decode().split()) == sorted(values)


def test_groups_list_and_reset_while_a_member_lives(broker):
    # Its own broker: it asserts the broker's whole list of groups.
    from tests.integration.cli import one_line_error

    with broker.client() as client:
        client.create_topic("r", 2)
    produce(broker.unix, "r", 2, 5, 0)
    args = ("consume", "--topic", "r", "--group", "rg", "--from-beginning",
            "--bootstrap", broker.unix)
    with running(*args) as member:
        poll(lambda: split(broker.unix, "rg", 1), SETTLE_S, "one member with both partitions")
        listed = hostbroker("groups", "list", "--json", "--bootstrap", broker.unix)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"groups": ["rg"], "without_members": []}
        refused = hostbroker("groups", "reset-offsets", "--group", "rg", "--topic", "r",
                             "--to", "earliest", "--bootstrap", broker.unix)
        assert refused.returncode == 1
        line = one_line_error(refused)
        assert "group rg has 1 live member" in line and "stop its consumers first" in line
        terminate(member)
    poll(lambda: described(broker.unix, "rg")[0] == "EMPTY", SETTLE_S, "the group empty")
    # (listed still if the consumer committed before it left: marked, it has no members)
    assert all(line == "rg  (no members)"
               for line in lines(hostbroker("groups", "list", "--bootstrap", broker.unix)))
    reset = hostbroker("groups", "reset-offsets", "--group", "rg", "--topic", "r",
                       "--to", "earliest", "--bootstrap", broker.unix)
    assert reset.returncode == 0, reset.stderr
    with broker.client() as client:
        stored = client.offset_fetch("rg", [("r", 0), ("r", 1)])
    assert sorted((r.partition, r.offset) for r in stored) == [(0, 0), (1, 0)]
