"""tools/bench/suite.py end to end in its smallest mode (``--smoke``): a real
broker and the naive one, every section but the cluster and the peers; the
JSON has its shape and every figure is a positive number; the plots draw from it."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

_BENCH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench"
_ROOT = _BENCH.parent.parent


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([sys.executable, str(_BENCH / "suite.py"), "--smoke", "--no-plots",
                           "--out", str(out), "--workdir", str(out)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=str(_ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out / "suite.json") as f:
        return out, json.load(f), done.stdout


def _positive(value, where):
    assert isinstance(value, (int, float)) and not isinstance(value, bool), where
    assert value > 0, f"{where} = {value}"


def test_the_smoke_run_writes_every_section_with_positive_figures(smoke):
    _, report, stdout = smoke
    assert report["suite"]["mode"] == "smoke"
    assert report["machine"]["nproc"] >= 1
    for key in ("fresh_file_mb_s", "reused_file_mb_s", "fdatasync_fresh_file_mb_s"):
        _positive(report["limits"]["pagecache"][key], key)
    for key in ("tcp_mb_s", "unix_mb_s"):
        _positive(report["limits"]["sendfile"][key], key)
    kinds = {c["kind"] for c in report["table"]}
    assert kinds == {"produce", "consume"}
    for cell in report["table"]:
        for key in ("messages", "seconds", "msgs_per_s", "mb_per_s", "cpu_cores",
                    "mem_mb_mean", "mem_mb_peak"):
            _positive(cell[key], f"table {cell['kind']} {key}")
        assert cell["mem_mb_mean"] <= cell["mem_mb_peak"]
        # MB/s is payload bytes: messages/s times the size (10^6 bytes a MB)
        assert cell["mb_per_s"] == pytest.approx(cell["msgs_per_s"] * cell["size"] / 1e6,
                                                 rel=0.01)
    for what, row in report["naive"].items():
        for name in ("hostbroker", "naive"):
            _positive(row[name]["msgs_per_s"], f"naive {what} {name}")
        _positive(row["ratio"], f"naive {what} ratio")
        assert row["ratio"] == pytest.approx(  # rounded to two places
            row["hostbroker"]["msgs_per_s"] / row["naive"]["msgs_per_s"], abs=0.006)
    for name in ("hostbroker", "naive"):
        for key in ("produce_mb_per_s", "fetch_mb_per_s", "produce_vs_pagecache",
                    "fetch_vs_sendfile"):
            _positive(report["raw"][name][key], f"raw {name} {key}")
    assert len(report["latency"]) == 2
    for what, by in report["latency"].items():
        for name in ("hostbroker", "naive"):
            p = by[name]
            for key in ("p50", "p99", "p99.9", "samples"):
                _positive(p[key], f"latency {what} {name} {key}")
            assert p["p50"] <= p["p99"] <= p["p99.9"]
    # the series the resource plot draws: both brokers, CPU and memory over the run
    assert {"hostbroker", "naive"} <= set(report["series"])
    assert all(mb > 0 for _, _, mb in report["series"]["hostbroker"])
    # what was not run is said, one line each
    assert report["skipped"] == ["peers: not in --smoke"]
    assert "skipped: peers: not in --smoke" in stdout


def test_the_plots_draw_from_the_report(smoke):
    sys.path.insert(0, str(_BENCH))
    import suite_plots

    out, report, _ = smoke
    names = suite_plots.write_all(report, str(out))
    assert names == ["throughput.png", "resources.png", "latency.png"]  # no peers ran
    for name in names:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 400_000, name


def test_the_replication_cells_are_told_apart_by_their_acks():
    sys.path.insert(0, str(_BENCH))
    import suite_plots
    import suite_tables

    base = {"producers": 1, "size": 100, "partitions": 1, "rf": 1, "consumers": 1}

    def cell(rf, acks):
        return dict(base, kind="produce", broker="3 brokers, ZooKeeper", rf=rf, acks=acks,
                    msgs_per_s=1000.0 * rf - acks)

    report = {"suite": {"base": base}, "table": [cell(3, -1), cell(1, 1), cell(3, 1),
                                                 cell(1, -1)]}
    assert [label for label, _ in suite_tables._cells(report)] == [
        "replication factor 1 (3 brokers), acks=1", "replication factor 3 (3 brokers), acks=1",
        "replication factor 1 (3 brokers), acks=-1", "replication factor 3 (3 brokers), acks=-1"]
    assert [(c["rf"], c["acks"]) for c in suite_plots._series(report, "rf")] == [(1, 1), (3, 1)]
    assert [(c["rf"], c["acks"]) for c in suite_plots._series(report, "rf", acks=-1)] == [
        (1, -1), (3, -1)]
