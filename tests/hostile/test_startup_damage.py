"""Damaged files at start-up take only their own partition offline (issue 7,
items 10 and 11): a corrupt ``partition.json``, a segment replaced by a
directory, a segment truncated mid-entry after a clean shutdown."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.log.message import encode_message_set
from tests.hostile.invariants import Tree, Violation, read_partition
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    stop_or_kill(b)


def payloads(topic: str, n: int = 30) -> list[bytes]:
    return [f"{topic}-{i}".encode() * (1 + i % 5) for i in range(n)]


def fill(broker: Broker, topics: list[str]) -> None:
    with broker.client() as client:
        for topic in topics:
            client.create_topic(topic, 1)
            for i in range(3):
                client.produce(topic, 0, encode_message_set(payloads(topic)[i * 10:(i + 1) * 10]),
                               acks=-1)


def partition_dir(broker: Broker, topic: str) -> str:
    return os.path.join(broker.settings["log.dirs"], f"{topic}_0")


def damage(kind: str, path: str) -> None:
    if kind.startswith("json"):
        content = {"json-invalid": "{not json", "json-list": "[1,2,3]", "json-empty": ""}[kind]
        with open(os.path.join(path, "partition.json"), "w") as f:
            f.write(content)
    elif kind == "segment-dir":
        (segment,) = glob.glob(os.path.join(path, "*.kafka"))
        os.unlink(segment)
        os.mkdir(segment)


KINDS = ["json-invalid", "json-list", "json-empty", "segment-dir"]


def test_damaged_partitions_go_offline_alone(broker):
    topics = ["healthy", *(f"bad-{k}" for k in KINDS)]
    broker.start()
    fill(broker, topics)
    assert broker.stop() == 0
    for kind in KINDS:
        damage(kind, partition_dir(broker, f"bad-{kind}"))
    try:
        broker.start()
    except RuntimeError as exc:
        raise Violation(f"the broker did not start with damaged partitions: {exc}") from None
    tree = Tree(broker.proc.pid)
    with broker.client() as client:
        assert read_partition(client, "healthy", 0) == payloads("healthy")
        client.produce("healthy", 0, encode_message_set([b"after"]), acks=-1)
        meta = {t.topic: t for t in client.metadata(topics).topics}
    offline = []
    for kind in KINDS:
        topic = meta[f"bad-{kind}"]
        codes = [topic.error_code] + [p.error_code for p in topic.partitions]
        if not any(code != ErrorCode.NONE for code in codes):
            offline.append(kind)
    assert not offline, f"damaged partitions shown as healthy in METADATA: {offline}"
    log = broker.log()
    unnamed = [k for k in KINDS if f"bad-{k}_0" not in log]
    assert not unnamed, f"start-up named no damaged partition for {unnamed}:\n{log[-2000:]}"
    tree.check()


def test_a_truncated_segment_after_a_clean_shutdown_is_cut_to_whole_entries(broker):
    broker.start()
    fill(broker, ["cut"])
    assert broker.stop() == 0
    (segment,) = glob.glob(os.path.join(partition_dir(broker, "cut"), "*.kafka"))
    size = os.path.getsize(segment)
    with open(segment, "r+b") as f:
        f.truncate(size - 7)  # mid-way through the last entry
    broker.start()
    with broker.client() as client:
        kept = read_partition(client, "cut", 0)
        assert kept == payloads("cut")[:len(kept)] and len(kept) == len(payloads("cut")) - 1
        client.produce("cut", 0, encode_message_set([b"after-cut"]), acks=-1)
        assert read_partition(client, "cut", 0) == kept + [b"after-cut"]


def test_a_missing_log_dir_entry_for_a_topic_does_not_stop_the_rest(broker):
    """A partition directory removed while the broker was down: the rest serves."""
    broker.start()
    fill(broker, ["stays", "gone"])
    assert broker.stop() == 0
    shutil.rmtree(partition_dir(broker, "gone"))
    broker.start()
    with broker.client() as client:
        assert read_partition(client, "stays", 0) == payloads("stays")
