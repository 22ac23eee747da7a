"""Changing a topic on a running broker (``hostbroker topics alter``,
ALTER_TOPIC; docs/spec/protocol.md "Changing topics"), under a producer's
load: new partitions receive, configs act without a restart, every
``partition.json`` records the change, refusals are one line; and the
groups a broker holds only offsets of (LIST_OFFSET_GROUPS, ``groups list``,
``groups describe`` without ``--topic``).

Brokers: max.message.bytes and the offsets-only groups share one default
broker (``served``): own topics and groups, the group lists read relative to
the test's start. The others keep their own: two restart their broker, two
need settings no other test uses (max.partitions.per.topic, response.max.bytes)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from hostbroker.client.errors import BrokerError
from hostbroker.client.producer import Producer
from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set, iter_messages
from tests.integration.cli import hostbroker, lines, one_line_error
from tests.integration.wire_helpers import module_broker

served = module_broker()  # the default broker the shareable tests use


def _poll(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


class _Load:
    """A sync producer sending keyed 100-byte values in a thread until stopped
    (at most ``limit`` messages), its metadata refreshed every 200 ms: where
    each acknowledged message went, and any failure. It retries for up to 10 s
    (a new partition of a topic with replicas across log dirs answers
    LEADER_NOT_AVAILABLE, retriable, until hb-logdirs has made it a leader)."""

    def __init__(self, uri: str, topic: str, limit: int = 20000):
        self.uri, self.topic, self.limit = uri, topic, limit
        self.placed: list[tuple[int, int]] = []  # (partition, offset)
        self.values: list[bytes] = []  # what was sent to each of placed
        self.failures: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with Producer(self.uri, topic_metadata_refresh_interval_ms=200,
                      message_send_max_retries=50, retry_backoff_ms=200) as producer:
            for i in range(self.limit):
                if self.stop.is_set():
                    return
                value = f"value-{i}-".encode().ljust(100, b"v")
                try:
                    md = producer.send(self.topic, value, key=f"key-{i}")
                except Exception as e:  # noqa: BLE001 - kept for the test to show
                    self.failures.append(e)
                    return
                self.values.append(value)
                self.placed.append((md.partition, md.offset))
                time.sleep(0.002)

    def partitions(self) -> set[int]:
        return {p for p, _ in list(self.placed)}

    def __enter__(self) -> "_Load":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def _describe(broker, topic: str) -> dict:
    result = hostbroker("topics", "describe", "--bootstrap", broker.unix, "--json", topic)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]


def _stored(broker, topic: str) -> dict[int, tuple[int, dict[int, bytes]]]:
    """Each partition's log start and ``{offset: payload}`` of what it holds."""
    out = {}
    with broker.client() as client:
        for p in client.metadata([topic]).topics[0].partitions:
            start = offset = p.log_start_offset
            held: dict[int, bytes] = {}
            while offset < p.log_end_offset:
                got = client.fetch(topic, p.partition, offset, 1 << 16)
                messages = list(iter_messages(got.message_set, offset))
                assert messages, f"nothing read at {topic}-{p.partition} offset {offset}"
                for m in messages:
                    held[m.offset] = m.payload
                offset = messages[-1].next_offset
            out[p.partition] = (start, held)
    return out


def _partition_files(broker, topic: str) -> dict[int, dict]:
    root = broker.settings["log.dirs"]
    out = {}
    for name in os.listdir(root):
        if name.startswith(f"{topic}_") and name[len(topic) + 1:].isdigit():
            with open(os.path.join(root, name, "partition.json")) as f:
                out[int(name[len(topic) + 1:])] = json.load(f)
    return out


def test_alter_under_a_producers_load(make_broker):
    broker = make_broker(log_retention_check_interval_ms=200)
    with broker.client() as client:
        client.create_topic("load", 2, {"segment.bytes": "1024"})
    with _Load(broker.unix, "load") as load:
        _poll(lambda: len(load.placed) >= 50, 20, "the producer under way")
        altered = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "load",
                             "--partitions", "4", "--config", "retention.bytes=2048")
        assert altered.returncode == 0, altered.stderr
        assert lines(altered) == ["altered topic load: 4 partitions, retention.bytes=2048"]
        # the producer finds the new partitions at its next metadata refresh
        _poll(lambda: {2, 3} <= load.partitions(), 20, "messages in the new partitions")
        # retention.bytes acts without a restart: old segments of every partition go
        with broker.client() as client:
            _poll(lambda: all(p.log_start_offset > 0 for p in
                              client.metadata(["load"]).topics[0].partitions
                              if p.partition < 2), 20, "retention deleting old segments")
    assert load.failures == []
    described = _describe(broker, "load")
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3]
    assert described["config"] == {"retention.bytes": "2048", "segment.bytes": "1024"}
    # retention keeps at most 2 KiB of each partition, the new ones too
    _poll(lambda: all(p["log_end_offset"] - p["log_start_offset"] <= 2048
                      for p in _describe(broker, "load")["partitions"]), 10,
          "every partition within retention.bytes")
    files = _partition_files(broker, "load")
    assert sorted(files) == [0, 1, 2, 3]
    for meta in files.values():
        assert meta["partitions"] == 4
        assert meta["config"] == {"retention.bytes": "2048", "segment.bytes": "1024"}

    # every message acknowledged is in the partition the producer was told, at
    # the offset it was told, unless retention has deleted it since
    stored = _stored(broker, "load")
    kept = 0
    for (p, offset), value in zip(load.placed, load.values):
        start, held = stored[p]
        if offset >= start:
            assert held.get(offset) == value, f"load-{p} offset {offset}"
            kept += 1
    assert kept >= 4  # (the newest of each partition at least)

    # a config deleted goes back to the broker's default, on every partition
    deleted = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "load",
                         "--delete-config", "retention.bytes")
    assert deleted.returncode == 0, deleted.stderr
    assert lines(deleted) == ["altered topic load: retention.bytes deleted"]
    assert _describe(broker, "load")["config"] == {"segment.bytes": "1024"}
    assert all(m["config"] == {"segment.bytes": "1024"}
               for m in _partition_files(broker, "load").values())

    # shrinking is refused in one line, nothing changed
    shrink = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "load",
                        "--partitions", "3")
    assert shrink.returncode == 1
    line = one_line_error(shrink)
    assert "INVALID_PARTITIONS" in line and "topic load has 4 partitions; partitions only grow" \
        in line
    assert len(_describe(broker, "load")["partitions"]) == 4

    # what was changed is what a restarted broker serves
    broker.stop()
    broker.start()
    described = _describe(broker, "load")
    assert len(described["partitions"]) == 4
    assert described["config"] == {"segment.bytes": "1024"}


def test_max_message_bytes_acts_on_every_route(served):
    """The handler's check (many partitions in one produce), the writer's
    (a lone produce of one partition) and a new partition's all take it at once."""
    broker = served
    big = encode_message_set([b"x" * 300])
    with broker.client() as client:
        client.create_topic("m", 1)
        client.produce("m", 0, big)
        client.alter_topic("m", partitions=2, set_configs={"max.message.bytes": "200"})
        for partition in (0, 1):
            with pytest.raises(BrokerError) as info:
                client.produce("m", partition, big)
            assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        results = client.produce_many([("m", 0, big), ("m", 1, big)], raise_on_error=False)
        assert [r.error_code for r in results] == [ErrorCode.MESSAGE_TOO_LARGE] * 2
        client.produce("m", 1, encode_message_set([b"small"]))
        client.alter_topic("m", delete_configs=["max.message.bytes"])
        client.produce("m", 0, big)
        results = client.produce_many([("m", 0, big), ("m", 1, big)], raise_on_error=False)
        assert [r.error_code for r in results] == [ErrorCode.NONE] * 2


def test_refusals_name_the_problem_and_change_nothing(make_broker):
    broker = make_broker(max_partitions_per_topic=8)
    with broker.client() as client:
        client.create_topic("r", 2, {"flush.messages": "10"})

        def refused(topic="r", **change):
            answer = client.alter_topic(topic, raise_on_error=False, **change)
            return answer.error_code, answer.error_message

        assert refused("nope", partitions=3) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                 "no topic nope")
        assert refused(partitions=1) == (
            ErrorCode.INVALID_PARTITIONS,
            "topic r has 2 partitions; partitions only grow (asked for 1)")
        assert refused(partitions=0)[0] == ErrorCode.INVALID_PARTITIONS
        assert refused(partitions=-5)[0] == ErrorCode.INVALID_PARTITIONS
        assert refused(partitions=9) == (
            ErrorCode.INVALID_PARTITIONS,
            "partitions must be between 1 and 8 (or -1: unchanged), not 9")
        assert refused(set_configs={"colour": "red"}) == (
            ErrorCode.INVALID_CONFIG, "colour: unknown topic config key")
        assert refused(set_configs={"segment.bytes": "1"})[0] == ErrorCode.INVALID_CONFIG
        assert "segment.bytes" in refused(set_configs={"segment.bytes": "1"})[1]
        assert refused(set_configs={"retention.ms": "soon"}) == (
            ErrorCode.INVALID_CONFIG, "retention.ms: expected an integer, got 'soon'")
        assert refused(delete_configs=["colour"]) == (
            ErrorCode.INVALID_CONFIG, "colour: unknown topic config key")
        assert refused(set_configs={"flush.ms": "5"}, delete_configs=["flush.ms"]) == (
            ErrorCode.INVALID_CONFIG, "flush.ms: both set and deleted")
        assert refused()[0] == ErrorCode.INVALID_REQUEST
        assert "nothing to change" in refused()[1]
        # one bad key refuses the whole request: the partitions did not grow either
        assert refused(partitions=4, set_configs={"flush.ms": "5", "colour": "red"})[0] == \
            ErrorCode.INVALID_CONFIG
        # validate_only checks and answers, changing nothing
        assert client.alter_topic("r", partitions=4, set_configs={"flush.ms": "5"},
                                  validate_only=True).error_code == ErrorCode.NONE
        assert len(client.metadata(["r"]).topics[0].partitions) == 2
        (configs,) = client.describe_topic_configs(["r"])
        assert {e.key: e.value for e in configs.configs} == {"flush.messages": "10"}
        # the same count as now, with a config: the config changes
        client.alter_topic("r", partitions=2, set_configs={"flush.ms": "5"})
        (configs, missing) = client.describe_topic_configs(["r", "nope"])
        assert {e.key: e.value for e in configs.configs} == {"flush.messages": "10",
                                                               "flush.ms": "5"}
        assert (missing.topic, missing.error_code) == ("nope",
                                                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        # and the connection stays open through every refusal
        assert client.metadata(["r"]).topics[0].topic == "r"
    # the command line checks before it connects: a usage error, status 2
    for args, said in [
        (("--partitions", "0"), "--partitions must be at least 1, not 0"),
        (("--config", "colour=red"), "colour: unknown topic config key"),
        (("--delete-config", "colour"), "--delete-config colour: unknown topic config key "
                                        "(one of segment.bytes, retention.ms, retention.bytes, "
                                        "flush.messages, flush.ms, max.message.bytes, "
                                        "min.insync.replicas)"),
        ((), "nothing to change: give --partitions, --config or --delete-config"),
    ]:
        result = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "r", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert one_line_error(result) == f"hostbroker topics alter: {said}"
    unknown = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "nope",
                         "--partitions", "3")
    assert unknown.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION: no topic nope" in one_line_error(unknown)


def test_groups_with_only_committed_offsets(served):
    broker = served
    with broker.client() as client:
        already = client.list_offset_groups()  # other tests' groups
        assert already.truncated == 0
        before = [g.group for g in already.groups]
        assert not {"other", "quiet", "nobody"} & set(before)
        client.create_topic("g", 2)
        client.create_topic("h", 1)
        for p in (0, 1):
            client.produce("g", p, encode_message_set([b"a" * 10, b"b" * 10]))
        client.produce("h", 0, encode_message_set([b"c" * 10]))
        client.offset_commit("quiet", [("g", 0, 20, None), ("h", 0, 0, None)])
        client.offset_commit("other", [("g", 1, 0, None)])
        listed = client.list_offset_groups()
    assert (listed.error_code, listed.truncated) == (ErrorCode.NONE, 0)
    assert [g.group for g in listed.groups] == sorted(before + ["other", "quiet"])
    assert [(g.group, g.topics) for g in listed.groups if g.group not in before] == [
        ("other", ("g",)), ("quiet", ("g", "h"))]
    result = hostbroker("groups", "list", "--bootstrap", broker.unix)
    assert result.returncode == 0, result.stderr
    assert len(lines(result)) == len(before) + 2
    assert [line for line in lines(result) if line.split()[0] not in before] == [
        "other  (no members)", "quiet  (no members)"]
    as_json = json.loads(hostbroker("groups", "list", "--json", "--bootstrap", broker.unix).stdout)
    assert sorted(as_json) == ["groups", "without_members"]
    assert as_json["groups"] == sorted(before + ["other", "quiet"])
    assert [g for g in as_json["without_members"] if g not in before] == ["other", "quiet"]

    # describe without --topic: every topic the group has offsets on, with lag
    described = json.loads(hostbroker("groups", "describe", "--bootstrap", broker.unix,
                                      "--group", "quiet", "--json").stdout)
    rows = [(r["topic"], r["partition"], r["committed"], r["log_end"], r["lag"])
            for r in described["partitions"]]
    # (an entry of a 10-byte value takes 20 bytes of the log)
    assert rows == [("g", 0, 20, 40, 20), ("g", 1, None, 40, None), ("h", 0, 0, 20, 20)]
    text = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "other")
    assert text.returncode == 0, text.stderr
    assert [line.split() for line in lines(text)[2:]] == [["g", "0", "-", "40", "-"],
                                                           ["g", "1", "0", "40", "40"]]
    none = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "nobody")
    assert none.returncode == 1
    assert "no group nobody" in one_line_error(none)


def test_list_offset_groups_is_cut_to_one_answer(make_broker):
    broker = make_broker(response_max_bytes=65536)
    names = [f"{i:03d}" + "g" * 247 for i in range(300)]  # 300 names of 250 bytes
    with broker.client() as client:
        client.create_topic("t", 1)
        for name in names:
            client.offset_commit(name, [("t", 0, 0, None)])
        listed = client.list_offset_groups()
    assert listed.error_code == ErrorCode.NONE and listed.truncated == 1
    assert 200 < len(listed.groups) < 300
    assert [g.group for g in listed.groups] == names[:len(listed.groups)]


def _replica_files(dirs: list[str], topic: str) -> dict[tuple[str, int], dict]:
    """(log dir, partition) -> the partition.json of each replica of ``topic``."""
    out = {}
    for d in dirs:
        for name in os.listdir(d):
            if name.startswith(f"{topic}_") and name[len(topic) + 1:].isdigit():
                with open(os.path.join(d, name, "partition.json")) as f:
                    out[(d, int(name[len(topic) + 1:]))] = json.load(f)
    return out


def test_alter_a_topic_with_replicas_across_log_dirs(make_broker, tmp_path):
    """hb-logdirs changes it: the config in its document, then on every replica;
    new partitions placed on two dirs each, their replicas in sync."""
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    broker = make_broker(log_dirs=",".join(dirs), log_retention_check_interval_ms=200)
    with broker.client() as client:
        client.create_topic("spread", 2, {"segment.bytes": "1024"}, replication_factor=2)
    with _Load(broker.unix, "spread") as load:
        _poll(lambda: len(load.placed) >= 50, 20, "the producer under way")
        altered = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "spread",
                             "--partitions", "3", "--config", "retention.bytes=2048")
        assert altered.returncode == 0, altered.stderr
        _poll(lambda: 2 in load.partitions(), 20, "messages in the new partition")
        with broker.client() as client:
            _poll(lambda: all(p.log_start_offset > 0 for p in
                              client.metadata(["spread"]).topics[0].partitions
                              if p.partition < 2), 20, "retention deleting old segments")
    assert load.failures == []
    wanted = {"retention.bytes": "2048", "segment.bytes": "1024"}
    described = _poll(lambda: (lambda d: d if d["config"] == wanted else None)(
        _describe(broker, "spread")), 10, "the new config described")
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    _poll(lambda: all(len(p["isr"]) == 2 for p in _describe(broker, "spread")["partitions"]),
          20, "every replica in sync")
    files = _replica_files(dirs, "spread")
    assert sorted(p for _, p in files) == [0, 0, 1, 1, 2, 2]  # two replicas each
    assert all(meta["config"] == wanted for meta in files.values())

    shrink = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "spread",
                        "--partitions", "2")
    assert shrink.returncode == 1
    assert "topic spread has 3 partitions; partitions only grow" in one_line_error(shrink)
    strict = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "spread",
                        "--config", "min.insync.replicas=3")
    assert strict.returncode == 1
    assert "min.insync.replicas 3 is more than the replication factor 2" in \
        one_line_error(strict)

    deleted = hostbroker("topics", "alter", "--bootstrap", broker.unix, "--topic", "spread",
                         "--delete-config", "retention.bytes")
    assert deleted.returncode == 0, deleted.stderr
    _poll(lambda: all(m["config"] == {"segment.bytes": "1024"}
                      for m in _replica_files(dirs, "spread").values()), 10,
          "every replica back to the default retention")
    broker.stop()
    broker.start()
    assert _describe(broker, "spread")["config"] == {"segment.bytes": "1024"}
