"""tools/bench/request_cpu.py: the bare sendfile stream it sets beside the
fetch load, and its arguments."""

import importlib.util
import os
import pathlib
import sys

import pytest

_BENCH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench"
sys.path.insert(0, str(_BENCH))  # it imports its neighbours (harness, latency_loads)
_spec = importlib.util.spec_from_file_location("request_cpu", _BENCH / "request_cpu.py")
rc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rc)


def test_the_sendfile_reference_streams_the_file_round_and_round(tmp_path):
    path = tmp_path / "segment.kafka"
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # not a multiple of a send
    r = rc.sendfile_reference(str(path), 0.3)
    assert r["bytes"] > path.stat().st_size  # past the end: from its start again
    assert r["mb_per_s"] > 0 and r["receiver_us"] >= 0 and r["sender_us"] >= 0


def test_arguments():
    a = rc.parse_args(["--loads", "fetch,sync", "--fetch-mib", "64"])
    assert (a.loads, a.fetch_mib) == (["fetch", "sync"], 64)
    assert rc.parse_args([]).fetch_mib == 256
    for bad in (["--fetch-mib", "3"], ["--loads", "fetch,nope"], ["--seconds", "0"]):
        with pytest.raises(SystemExit):
            rc.parse_args(bad)


def test_the_parts_load(tmp_path):
    """Its arguments, and against a real broker: every FETCH reads every
    partition's message."""
    a = rc.parse_args(["--loads", "parts", "--partitions", "3"])
    assert (a.loads, a.partitions) == (["parts"], 3)
    assert rc.parse_args([]).partitions == 8
    for bad in (["--partitions", "0"], ["--partitions", "1001"]):
        with pytest.raises(SystemExit):
            rc.parse_args(bad)
    from hostbroker.client.simple import SimpleClient
    from hostbroker.log.message import encode_message_set
    from tests.integration.broker import Broker

    broker = Broker(tmp_path).start()
    try:
        with SimpleClient(broker.tcp) as client:
            client.create_topic(rc.PARTS_TOPIC, 3)
            for p in range(3):
                client.produce(rc.PARTS_TOPIC, p, encode_message_set([b"x" * 100]))
        r = rc.fetch_parts_for(broker.tcp, 3, 0.3)
    finally:
        broker.stop()
    assert r["requests"] > 0
    assert r["msgs_per_s"] == pytest.approx(3 * r["requests"] / r["seconds"])
    assert r["mb_per_s"] == pytest.approx(3 * 110 * r["requests"] / r["seconds"] / 1e6)
