"""``hostbroker topics ...`` as a subprocess against a real broker; and, on a
broker with three log dirs, the tools of replicas across log dirs: ``topics
create --replication-factor``, ``describe`` by dir path, ``logdirs list`` and
``reassign --bootstrap``.

Brokers: the first two tests share one default broker (``served``), each with
its own topic names and the topic lists read relative to the test's start; the
dir refusals and the reassignment share one three-dir broker (``shared_dirs``).
Kept on their own broker: the version-0 describe (its own response_max_bytes),
the balanced placement (placement counts every dir's load, so it needs an empty
broker) and the logdirs/top test (asserts the broker-wide under-replicated list
is empty)."""

from __future__ import annotations

import json
import os
import time

import pytest

from hostbroker.log.message import encode_message_set
from tests.integration.broker import Broker
from tests.integration.cli import hostbroker, lines, one_line_error
from tests.integration.wire_helpers import module_broker, stop_or_kill

served = module_broker()  # the default broker of the first two tests


def test_create_list_describe_delete(served):
    broker = served
    # the topics other tests of the module made: the lists below are read relative to it
    before = lines(hostbroker("topics", "list", "--bootstrap", broker.tcp))
    assert not {"views", "clicks"} & set(before)
    created = hostbroker("topics", "create", "--bootstrap", broker.tcp, "--topic", "views",
                         "--partitions", "3", "--config", "retention.ms=60000")
    assert created.returncode == 0, created.stderr
    assert lines(created) == ["created topic views with 3 partitions retention.ms=60000"]
    assert hostbroker("topics", "create", "--bootstrap", broker.unix, "--topic", "clicks").returncode == 0

    listed = hostbroker("topics", "list", "--bootstrap", broker.unix)
    assert lines(listed) == sorted(before + ["clicks", "views"])

    with broker.client() as client:
        client.produce("views", 1, encode_message_set([b"first"]))
    described = hostbroker("topics", "describe", "--bootstrap", broker.tcp, "views")
    assert described.returncode == 0, described.stderr
    out = lines(described)
    assert out[0] == "topic: views  partitions: 3"
    assert out[1] == "  config: retention.ms=60000"  # the topic's overrides
    assert out[2].split() == ["partition", "broker", "log", "start", "log", "end", "bytes",
                              "log", "dir", "error"]
    rows = [line.split() for line in out[3:]]
    log_dir = str(broker.settings["log.dirs"])
    assert rows == [["0", "0", "0", "0", "0", log_dir, "NONE"],
                    ["1", "0", "0", "15", "15", log_dir, "NONE"],
                    ["2", "0", "0", "0", "0", log_dir, "NONE"]]

    described = hostbroker("topics", "describe", "--bootstrap", broker.tcp, "--json")
    assert described.returncode == 0 and described.stderr == b"", described.stderr
    as_json = json.loads(described.stdout)  # a list of topics, as before replicas across dirs
    assert [t["topic"] for t in as_json] == sorted(before + ["clicks", "views"])
    by_name = {t["topic"]: t for t in as_json}
    views, clicks = by_name["views"], by_name["clicks"]
    assert views["partitions"][1]["log_end_offset"] == 15
    assert (clicks["config"], views["config"]) == ({}, {"retention.ms": "60000"})
    # a plain partition is one replica, the leader, in its log dir
    one = views["partitions"][1]
    assert (one["leader"], one["replicas"], one["isr"]) == (log_dir, [log_dir], [log_dir])
    assert one["under_replicated"] is False
    # --topic names a topic as the other topic commands do.
    by_option = json.loads(hostbroker("topics", "describe", "--bootstrap", broker.tcp,
                                      "--topic", "views", "--json").stdout)
    assert by_option == [views]

    # METADATA v2 on one log dir: the dir has no id, so no dir is named (spec)
    with broker.client() as client:
        (p1,) = [p for p in client.metadata_v2(("views",)).topics[0].partitions
                 if p.partition == 1]
    assert (p1.leader_epoch, p1.leader_dir, p1.replica_dirs, p1.isr_dirs, p1.target_dirs) == (
        -1, -1, (), (), ())

    deleted = hostbroker("topics", "delete", "--bootstrap", broker.tcp, "--topic", "clicks")
    assert lines(deleted) == ["deleted topic clicks"]
    assert lines(hostbroker("topics", "list", "--bootstrap", broker.tcp)) == sorted(
        before + ["views"])


def test_refusals_are_one_line_with_the_right_status(served):
    broker = served
    b = ("--bootstrap", broker.tcp)
    assert hostbroker("topics", "create", *b, "--topic", "t").returncode == 0

    exists = hostbroker("topics", "create", *b, "--topic", "t")
    assert exists.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in one_line_error(exists)

    missing = hostbroker("topics", "describe", *b, "t", "nope")
    assert missing.returncode == 1
    assert one_line_error(missing) == "hostbroker topics describe: no topic nope"
    assert lines(missing)[0] == "topic: t  partitions: 1"

    gone = hostbroker("topics", "delete", *b, "--topic", "nope")
    assert gone.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in one_line_error(gone)

    for args, needle in [
        (("--topic", "u", "--config", "retention.ms=soon"), "retention.ms: expected an integer"),
        (("--topic", "u", "--config", "colour=red"), "colour: unknown topic config key"),
        (("--topic", "u", "--config", "novalue"), "--config 'novalue': expected KEY=VALUE"),
        (("--topic", "u", "--partitions", "0"), "--partitions must be at least 1"),
        (("--topic", "a b"), "invalid topic name 'a b'"),
    ]:
        refused = hostbroker("topics", "create", *b, *args)
        assert refused.returncode == 2, refused
        assert needle in one_line_error(refused)

    bad_uri = hostbroker("topics", "list", "--bootstrap", "http://x")
    assert bad_uri.returncode == 2 and "bad broker URI" in one_line_error(bad_uri)
    assert hostbroker("topics", "list", *b).returncode == 0


def test_describe_answered_by_version_0_alone_when_version_2_is_too_large(make_broker):
    broker = make_broker(response_max_bytes=65536)  # (the least allowed)
    log_dir = str(broker.settings["log.dirs"])
    # a partition is 28 bytes and its log dir in version 0's answer, 54 and more
    # in version 2's: enough partitions that only version 0 fits
    count = 65536 // (54 + len(log_dir.encode())) + 20
    assert (28 + len(log_dir.encode())) * count < 60000
    b = ("--bootstrap", broker.unix)
    created = hostbroker("topics", "create", *b, "--topic", "wide", "--partitions", str(count))
    assert created.returncode == 0, created.stderr
    described = hostbroker("topics", "describe", *b, "--json", "wide")
    assert described.returncode == 0, described.stderr
    (line,) = described.stderr.decode().splitlines()
    assert line.startswith(
        "hostbroker topics describe: replicas not shown: broker error: INVALID_REQUEST")
    (topic,) = json.loads(described.stdout)
    assert len(topic["partitions"]) == count
    assert all(p["log_dir"] == log_dir and "replicas" not in p for p in topic["partitions"])


def test_unreachable_broker_is_one_line_and_status_1(tmp_path):
    result = hostbroker("topics", "list", "--bootstrap", f"unix://{tmp_path}/no.sock")
    assert result.returncode == 1
    assert one_line_error(result).startswith(
        f"hostbroker topics list: cannot reach the broker at unix://{tmp_path}/no.sock")


# -- replicas across log dirs: one broker with three log dirs ----------------------------


@pytest.fixture
def dirs_broker(make_broker, tmp_path):
    """A three-dir broker of the test's own (placement and top read every dir's load)."""
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    return make_broker(log_dirs=",".join(dirs)), dirs


@pytest.fixture(scope="module")
def shared_dirs(tmp_path_factory):
    """One three-dir broker for the tests that touch only their own topics and
    assert nothing about the other dirs' load."""
    root = tmp_path_factory.mktemp("hb-dirs")
    dirs = [str(root / f"d{i}") for i in range(3)]
    broker = Broker(root, log_dirs=",".join(dirs)).start()
    yield broker, dirs
    stop_or_kill(broker)


def _describe(broker, topic: str) -> list:
    result = hostbroker("topics", "describe", "--bootstrap", broker.tcp, "--json", topic)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _poll(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def test_replicated_topic_on_log_dirs_is_placed_balanced_and_described_by_path(dirs_broker):
    broker, dirs = dirs_broker
    created = hostbroker("topics", "create", "--bootstrap", broker.tcp, "--topic", "spread",
                         "--partitions", "3", "--replication-factor", "2")
    assert created.returncode == 0, created.stderr
    assert lines(created) == ["created topic spread with 3 partitions, replication factor 2"]

    parts = _describe(broker, "spread")[0]["partitions"]
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert len(set(p["replicas"])) == 2 and set(p["replicas"]) <= set(dirs)
        assert p["leader"] == p["replicas"][0] == p["log_dir"]
        assert p["isr"] == p["replicas"] and p["under_replicated"] is False
    # balanced: each dir holds two replicas and leads one partition
    held = [d for p in parts for d in p["replicas"]]
    assert sorted(held.count(d) for d in dirs) == [2, 2, 2]
    assert sorted(p["leader"] for p in parts) == sorted(dirs)

    table = lines(hostbroker("topics", "describe", "--bootstrap", broker.tcp, "spread"))
    assert table[0] == "topic: spread  partitions: 3  replication factor: 2"
    assert table[1].split()[-4:] == ["leader", "replicas", "isr", "error"]

    listed = hostbroker("logdirs", "list", "--bootstrap", broker.tcp, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["log_dirs"]
    assert [(r["path"], r["replicas"], r["leaders"], r["under_replicated"]) for r in rows] == [
        (d, 2, 1, 0) for d in dirs]


def test_replicated_topic_refusals_are_one_line(shared_dirs):
    broker, _ = shared_dirs
    b = ("--bootstrap", broker.tcp)
    too_many = hostbroker("topics", "create", *b, "--topic", "wide", "--replication-factor", "4")
    assert too_many.returncode == 1
    assert ("replication factor 4 needs 4 usable log dirs; the broker has 3"
            in one_line_error(too_many))
    over = hostbroker("topics", "create", *b, "--topic", "wide", "--replication-factor", "9")
    assert over.returncode == 2
    assert one_line_error(over) == "hostbroker topics create: --replication-factor must be 1 to 8"
    strict = hostbroker("topics", "create", *b, "--topic", "wide", "--replication-factor", "2",
                        "--config", "min.insync.replicas=3")
    assert strict.returncode == 1
    assert "min.insync.replicas 3 is more than the replication factor 2" in one_line_error(strict)
    assert "wide" not in lines(hostbroker("topics", "list", *b))


def test_reassign_empties_a_log_dir_and_verify_says_done(shared_dirs, tmp_path):
    broker, dirs = shared_dirs
    b = ("--bootstrap", broker.tcp)
    assert hostbroker("topics", "create", *b, "--topic", "moved", "--partitions", "3",
                      "--replication-factor", "2").returncode == 0
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "moved"}]}))
    generated = hostbroker("reassign", "generate", *b, "--topics-to-move-json-file",
                           str(topics), "--dir-list", f"{dirs[0]},{dirs[1]}/")
    assert generated.returncode == 0, generated.stderr
    out = lines(generated)
    assert out[0] == "Current partition replica assignment" and out[3].startswith("Proposed")
    proposed = json.loads(out[4])["partitions"]
    assert proposed and all(set(p["log_dirs"]) == {dirs[0], dirs[1]} for p in proposed)

    plan = tmp_path / "plan.json"
    plan.write_text(out[4])
    executed = hostbroker("reassign", "execute", *b, "--reassignment-json-file", str(plan))
    assert executed.returncode == 0, executed.stderr
    started = lines(executed)
    assert started[0] == "Current partition replica assignment (keep it to roll back)"
    assert json.loads(started[1])["partitions"][0]["log_dirs"]
    assert started[2] == (f"started the reassignment of {len(proposed)} partition"
                          f"{'s' if len(proposed) != 1 else ''}")

    def verified():
        result = hostbroker("reassign", "verify", *b, "--reassignment-json-file", str(plan))
        return result.returncode == 0 and result
    done = _poll(verified, 30, "the reassignment done")
    assert all(line.endswith(": done") for line in lines(done))
    parts = _describe(broker, "moved")[0]["partitions"]
    assert all(dirs[2] not in p["replicas"] and len(p["replicas"]) == 2 for p in parts)
    _poll(lambda: not any(name.startswith("moved") for name in os.listdir(dirs[2])), 10,
          f"the old replicas' files gone from {dirs[2]}")

    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moved", "partition": 0, "log_dirs": ["/nowhere"]}]}))
    refused = hostbroker("reassign", "execute", *b, "--reassignment-json-file", str(unknown))
    assert refused.returncode == 1
    assert one_line_error(refused).startswith(
        "hostbroker reassign execute: moved-0: /nowhere is not a log dir of the broker")
    # a topic with one replica is not the broker's to move between dirs: nothing moves,
    # and the line names the partition that stopped it
    assert hostbroker("topics", "create", *b, "--topic", "single").returncode == 0
    single = tmp_path / "single.json"
    single.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moved", "partition": 0, "log_dirs": [dirs[1], dirs[0]]},
        {"topic": "single", "partition": 0, "log_dirs": [dirs[1]]}]}))
    stopped = hostbroker("reassign", "execute", *b, "--reassignment-json-file", str(single))
    assert stopped.returncode == 1 and stopped.stdout == b""
    line = one_line_error(stopped)
    assert line.startswith("hostbroker reassign execute: broker error: INVALID_REQUEST: ")
    assert line.endswith(" (single-0 UNKNOWN_TOPIC_OR_PARTITION)")
    # (METADATA v2 tells it by its leader epoch: -1, where a dir-placed one has one)
    with broker.client() as client:
        answer = client.metadata_v2(("single", "moved"))
    epochs = {t.topic: {p.leader_epoch for p in t.partitions} for t in answer.topics}
    assert epochs["single"] == {-1} and min(epochs["moved"]) >= 0
    # so generate leaves such a partition out, in one line, even off its dir
    (held,) = {p["log_dir"] for p in _describe(broker, "single")[0]["partitions"]}
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "single"},
                                                            {"topic": "moved"}]}))
    others = ",".join(d for d in dirs if d != held)
    left = hostbroker("reassign", "generate", *b, "--topics-to-move-json-file", str(topics),
                      "--dir-list", others)
    assert left.returncode == 0, left.stderr
    assert left.stderr.decode().splitlines() == [
        "hostbroker reassign generate: left out single-0: one replica, not placed on log "
        "dirs (a topic created with a replication factor of 1 stays on its dir)"]
    out = lines(left)
    assert "single" not in out[1] and "single" not in out[4]


def test_logdirs_online_and_forget_answer_in_one_line_and_top_lists_the_dirs(dirs_broker):
    broker, dirs = dirs_broker
    b = ("--bootstrap", broker.unix)
    # a dir that is online: nothing to reopen, said so
    done = hostbroker("logdirs", "online", *b, "--log-dir", dirs[1] + "/")
    assert done.returncode == 0, done.stderr
    ids = {d["path"]: d["id"] for d in json.loads(
        hostbroker("logdirs", "list", *b, "--json").stdout)["log_dirs"]}
    assert lines(done) == [f"log dir {dirs[1]} is online (id {ids[dirs[1]]})"]
    elsewhere = hostbroker("logdirs", "online", *b, "--log-dir", "/nowhere")
    assert elsewhere.returncode == 1
    assert "LOG_DIR_NOT_FOUND" in one_line_error(elsewhere)
    unknown = hostbroker("logdirs", "forget", *b, "--log-dir-id", str(max(ids.values()) + 7))
    assert unknown.returncode == 1 and "LOG_DIR_NOT_FOUND" in one_line_error(unknown)
    live = hostbroker("logdirs", "forget", *b, "--log-dir-id", str(ids[dirs[0]]))
    assert live.returncode == 1 and "is online" in one_line_error(live)

    assert hostbroker("topics", "create", *b, "--topic", "watched", "--replication-factor",
                      "3").returncode == 0
    watched = _describe(broker, "watched")[0]["partitions"][0]
    _poll(lambda: not _describe(broker, "watched")[0]["partitions"][0][
        "under_replicated"], 10, "watched's ISR whole")
    out = hostbroker("top", "--json", "--interval", "0.1", "--iterations", "1",
                     "--set", f"log.dirs={broker.settings['log.dirs']}")
    assert out.returncode == 0, out.stderr
    reading = json.loads(out.stdout.splitlines()[-1])
    assert [(d["path"], d["id"], d["state"]) for d in reading["log_dirs"]] == [
        (d, ids[d], "online") for d in dirs]
    assert reading["under_replicated_partitions"] == []
    assert "logdirs" in {w["kind"] for w in reading["workers"]}
    assert watched["leader"] in dirs
