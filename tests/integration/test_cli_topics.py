"""``hostbroker topics ...`` as a subprocess against a real broker."""

from __future__ import annotations

import json

from hostbroker.log.message import encode_message_set
from tests.integration.cli import hostbroker, lines, one_line_error


def test_create_list_describe_delete(broker):
    created = hostbroker("topics", "create", "--bootstrap", broker.tcp, "--topic", "views",
                         "--partitions", "3", "--config", "retention.ms=60000")
    assert created.returncode == 0, created.stderr
    assert lines(created) == ["created topic views with 3 partitions retention.ms=60000"]
    assert hostbroker("topics", "create", "--bootstrap", broker.unix, "--topic", "clicks").returncode == 0

    listed = hostbroker("topics", "list", "--bootstrap", broker.unix)
    assert lines(listed) == ["clicks", "views"]

    with broker.client() as client:
        client.produce("views", 1, encode_message_set([b"first"]))
    described = hostbroker("topics", "describe", "--bootstrap", broker.tcp, "views")
    assert described.returncode == 0, described.stderr
    out = lines(described)
    assert out[0] == "topic: views  partitions: 3"
    assert out[1].split() == ["partition", "broker", "log", "start", "log", "end", "bytes",
                              "log", "dir", "error"]
    rows = [line.split() for line in out[2:]]
    log_dir = str(broker.settings["log.dirs"])
    assert rows == [["0", "0", "0", "0", "0", log_dir, "NONE"],
                    ["1", "0", "0", "15", "15", log_dir, "NONE"],
                    ["2", "0", "0", "0", "0", log_dir, "NONE"]]

    as_json = json.loads(hostbroker("topics", "describe", "--bootstrap", broker.tcp,
                                    "--json").stdout)
    assert [t["topic"] for t in as_json] == ["clicks", "views"]
    assert as_json[1]["partitions"][1]["log_end_offset"] == 15
    # --topic names a topic as the other topic commands do.
    by_option = json.loads(hostbroker("topics", "describe", "--bootstrap", broker.tcp,
                                      "--topic", "views", "--json").stdout)
    assert by_option == as_json[1:]

    deleted = hostbroker("topics", "delete", "--bootstrap", broker.tcp, "--topic", "clicks")
    assert lines(deleted) == ["deleted topic clicks"]
    assert lines(hostbroker("topics", "list", "--bootstrap", broker.tcp)) == ["views"]


def test_refusals_are_one_line_with_the_right_status(broker):
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


def test_unreachable_broker_is_one_line_and_status_1(tmp_path):
    result = hostbroker("topics", "list", "--bootstrap", f"unix://{tmp_path}/no.sock")
    assert result.returncode == 1
    assert one_line_error(result).startswith(
        f"hostbroker topics list: cannot reach the broker at unix://{tmp_path}/no.sock")
