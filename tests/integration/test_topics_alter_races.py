"""ALTER_TOPIC where it is risky (issue 37): changes of one topic racing on a
broker of several log dirs (writers) and handlers, a grow racing a config
change, a partition on an offline log dir, a grow past the partition table,
padded values, and a lowered ``max.message.bytes`` followed by a writer killed
with large messages not yet flushed. A real broker, raw sockets for the races."""

from __future__ import annotations

import json
import os
import signal
import time

from hostbroker.errors import ErrorCode
from hostbroker.log.config import TOPIC_CONFIG_KEYS
from hostbroker.log.message import encode_message_set, iter_messages
from hostbroker.protocol import topics_admin as ta
from tests.integration.wire_helpers import RawSocket, raw_frame
from tests.protocol.wire import array, i32, string


def alter_body(topic: str, partitions: int = -1, sets=(), deletes=(), flag: int = 0) -> bytes:
    return (string(topic) + i32(partitions)
            + array(*(string(k) + string(v) for k, v in sets))
            + array(*(string(k) for k in deletes)) + flag.to_bytes(1, "big", signed=True))


def partition_files(dirs: list[str], topic: str) -> dict[int, dict]:
    out = {}
    for d in dirs:
        for name in os.listdir(d):
            if name.startswith(f"{topic}_") and name[len(topic) + 1:].isdigit():
                with open(os.path.join(d, name, "partition.json"), "rb") as f:
                    raw = f.read()
                out[int(name[len(topic) + 1:])] = json.loads(raw) if raw[:1] == b"{" and \
                    raw != b"{not json" else raw
    return out


def two_dirs(make_broker, tmp_path, **settings):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    broker = make_broker(log_dirs=",".join(dirs), num_handlers=2, num_processors=2, **settings)
    return broker, dirs


def test_racing_changes_leave_every_partition_with_the_same_config(make_broker, tmp_path):
    """Rounds of six pipelined ALTER_TOPICs from six connections (two
    handlers), each setting another retention.ms, one of them growing the
    topic too: afterwards every partition, the new ones included, holds the
    same overrides and count, the last change decided, which DESCRIBE shows."""
    broker, dirs = two_dirs(make_broker, tmp_path)
    count = 40
    with broker.client() as client:
        client.create_topic("raced", count, {"flush.ms": "900"})
    for round_ in range(6):
        grown = count + 2
        socks = [RawSocket(broker.unix) for _ in range(6)]
        try:
            for n, sock in enumerate(socks):
                sets = [("retention.ms", str(1_000_000 + round_ * 100 + n))]
                sock.send(raw_frame(19, n, alter_body("raced", grown if n == 3 else -1, sets)))
            codes = [ta.decode_response(sock.read_frame(), ta.AlterTopicResponse)[1].error_code
                     for sock in socks]
        finally:
            for sock in socks:
                sock.sock.close()
        assert codes == [ErrorCode.NONE] * 6, codes
        count = grown
        files = partition_files(dirs, "raced")
        assert sorted(files) == list(range(count))
        configs = {json.dumps(m["config"], sort_keys=True) for m in files.values()}
        assert len(configs) == 1, (round_, configs)
        (config,) = configs
        assert json.loads(config)["flush.ms"] == "900"
        assert int(json.loads(config)["retention.ms"]) // 100 == 10_000 + round_  # this round's
        assert {m["partitions"] for m in files.values()} == {count}
        with broker.client() as client:
            (described,) = client.describe_topic_configs(["raced"])
        assert {e.key: e.value for e in described.configs} == json.loads(config)


def test_a_partition_on_an_offline_log_dir_refuses_the_change_up_front(make_broker, tmp_path):
    """One partition cannot be changed (its partition.json is damaged: it is
    offline): the change, a grow with it, is refused STORAGE_ERROR naming it,
    and no other partition changed nor was made."""
    broker, dirs = two_dirs(make_broker, tmp_path)
    with broker.client() as client:
        client.create_topic("half", 4, {"flush.ms": "900"})
    before = partition_files(dirs, "half")
    assert broker.stop() == 0
    hurt = next(os.path.join(d, "half_2") for d in dirs if os.path.isdir(os.path.join(d, "half_2")))
    with open(os.path.join(hurt, "partition.json"), "wb") as f:
        f.write(b"{not json")
    broker.start()
    with broker.client() as client:
        for validate in (True, False):
            refused = client.alter_topic("half", partitions=6, set_configs={"retention.ms": "5000"},
                                         validate_only=validate, raise_on_error=False)
            assert refused.error_code == ErrorCode.STORAGE_ERROR
            assert "half-2 is offline" in refused.error_message
            assert "nothing changed" in refused.error_message
        assert len(client.metadata(["half"]).topics[0].partitions) == 4
    after = partition_files(dirs, "half")
    del before[2], after[2]
    assert after == before


def test_a_grow_past_the_free_slots_is_refused_up_front(make_broker):
    """A grow the partition table cannot hold is refused before any partition
    is made, validate_only too: the topic keeps its count and its config."""
    broker = make_broker(max_partitions=8)
    with broker.client() as client:
        client.create_topic("small", 2, {"flush.ms": "900"})
        client.create_topic("other", 3)
        for validate in (True, False):
            refused = client.alter_topic("small", partitions=6, set_configs={"flush.ms": "100"},
                                         validate_only=validate, raise_on_error=False)
            assert refused.error_code == ErrorCode.INVALID_REQUEST
            assert "4 partitions to make, 3 slots free" in refused.error_message
        assert len(client.metadata(["small"]).topics[0].partitions) == 2
        (described,) = client.describe_topic_configs(["small"])
        assert {e.key: e.value for e in described.configs} == {"flush.ms": "900"}
        # what fits still grows
        assert client.alter_topic("small", partitions=5).error_code == ErrorCode.NONE
    root = broker.settings["log.dirs"]
    assert sorted(n for n in os.listdir(root) if n.startswith("small_")) == [
        f"small_{p}" for p in range(5)]


def test_values_are_recorded_normalised_and_long_ones_refused(make_broker):
    """A value padded with spaces is kept as the broker reads it; a value past
    64 characters (whatever it holds) is refused INVALID_CONFIG at once."""
    broker = make_broker()
    with broker.client() as client:
        client.create_topic("pad", 3)
    padded = [(k, " " * 20 + ("1" if k == "min.insync.replicas" else "1000000") + " " * 20)
              for k in TOPIC_CONFIG_KEYS]
    with RawSocket(broker.unix) as sock:
        sock.send(raw_frame(19, 1, alter_body("pad", sets=padded)))
        got = ta.decode_response(sock.read_frame(), ta.AlterTopicResponse)[1]
    assert got.error_code == ErrorCode.NONE, got
    files = partition_files([broker.settings["log.dirs"]], "pad")
    for meta in files.values():
        assert all(v == v.strip() for v in meta["config"].values()), meta
        assert len(meta["config"]) == len(TOPIC_CONFIG_KEYS)
    long_ = [(k, " " * 32000 + value.strip()) for k, value in padded]  # valid, but long
    with RawSocket(broker.unix) as sock:
        started = time.monotonic()
        sock.send(raw_frame(19, 2, alter_body("pad", sets=long_)))
        got = ta.decode_response(sock.read_frame(), ta.AlterTopicResponse)[1]
        assert time.monotonic() - started < 5
    assert got.error_code == ErrorCode.INVALID_CONFIG
    assert "at most 64" in got.error_message
    assert partition_files([broker.settings["log.dirs"]], "pad") == files


def test_a_lowered_limit_loses_nothing_when_the_writer_is_killed(make_broker):
    """Large messages not yet flushed, max.message.bytes lowered below them,
    the writer killed (SIGKILL): the replaced writer recovers the partition
    with every message, at the same log end."""
    broker = make_broker(num_handlers=1)
    sent = [b"x" * 5000, b"y" * 5000, b"z" * 5000, b"small"]
    with broker.client() as client:
        client.create_topic("lowered", 1, {"flush.messages": "1000000", "flush.ms": "3600000"})
        for value in sent:
            client.produce("lowered", 0, encode_message_set([value]))
        end = client.metadata(["lowered"]).topics[0].partitions[0].log_end_offset
        assert client.alter_topic("lowered", set_configs={"max.message.bytes": "1000"}
                                  ).error_code == ErrorCode.NONE
    victim = broker.workers()["hb-writer-0"]
    os.kill(victim, signal.SIGKILL)
    broker.wait_worker_replaced("hb-writer-0", victim)
    deadline = time.monotonic() + 15
    with broker.client() as client:
        while True:
            part = client.metadata(["lowered"]).topics[0].partitions[0]
            if part.error_code == ErrorCode.NONE:
                break
            assert time.monotonic() < deadline, broker.log()
            time.sleep(0.1)
        assert part.log_end_offset == end, broker.log()
        got = client.fetch("lowered", 0, 0, 1 << 16).message_set
        assert [m.payload for m in iter_messages(got, 0)] == sent
        # and produces go by the lowered limit
        refused = client.produce("lowered", 0, encode_message_set([b"w" * 5000]),
                                 raise_on_error=False)
        assert refused.error_code == ErrorCode.MESSAGE_TOO_LARGE
