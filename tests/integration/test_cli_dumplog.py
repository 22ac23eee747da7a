"""``hostbroker dump-log`` as a subprocess, on segments a real broker wrote."""

from __future__ import annotations

import json
import os

from hostbroker.log.message import CODEC_GZIP, encode_message_set
from tests.integration.cli import hostbroker, lines, one_line_error


def test_dump_log_of_a_broker_partition_then_a_torn_tail(make_broker, tmp_path):
    broker = make_broker()
    with broker.client() as client:
        client.create_topic("events", 1, {"segment.bytes": "200"})
        for i in range(6):
            client.produce("events", 0, encode_message_set([b"event-%d-%d" % (i, j)
                                                             for j in range(4)]))
        client.produce("events", 0, encode_message_set([b"zipped"] * 3, codec=CODEC_GZIP))
    assert broker.stop() == 0
    partition = os.path.join(broker.settings["log.dirs"], "events_0")
    segments = sorted(name for name in os.listdir(partition) if name.endswith(".kafka"))
    assert len(segments) > 1

    result = hostbroker("dump-log", "--deep", "--print-payloads", "--json", partition)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in lines(result)]
    entries = [r for r in records if r["type"] == "entry"]
    assert [e["payload"] for e in entries if e["codec"] == "none"] == [
        f"event-{i}-{j}" for i in range(6) for j in range(4)]
    offsets = [e["offset"] for e in entries]
    assert offsets[0] == 0 and offsets == sorted(offsets)
    assert [r["payload"] for r in records if r["type"] == "message"] == ["zipped"] * 3
    summaries = [r for r in records if r["type"] == "summary"]
    assert [s["base_offset"] for s in summaries] == [int(name[:20]) for name in segments]

    last = os.path.join(partition, segments[-1])
    with open(last, "ab") as f:
        f.write(b"\x00\x00\x00\x40torn")
    size = os.path.getsize(last)
    torn = hostbroker("dump-log", last)
    assert torn.returncode == 3
    assert lines(torn)[-1].startswith(
        f"not valid from byte {size - 8} (offset {int(segments[-1][:20]) + size - 8}): "
        "partial entry (4 of 64 bytes present)")

    missing = hostbroker("dump-log", os.path.join(partition, "nothing.kafka"))
    assert missing.returncode == 2
    assert "not a readable file" in one_line_error(missing)
