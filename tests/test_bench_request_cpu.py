"""tools/bench/request_cpu.py: the bare sendfile stream it sets beside the
fetch load, and its arguments."""

import importlib.util
import os
import pathlib
import sys

import pytest

_BENCH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench"
sys.path.insert(0, str(_BENCH))  # it imports its neighbours (broker_throughput, latency_loads)
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
