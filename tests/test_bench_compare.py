"""tools/bench/compare_sweep.py: the grids compare.py sweeps and choosing each system's best."""

import importlib.util
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench" / "compare_sweep.py"
_spec = importlib.util.spec_from_file_location("compare_sweep", _PATH)
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def run(system, value, rate, phase="produce", size=100, capped=False):
    return {"system": system, "size": size, "phase": phase, "value": value,
            "msgs_per_s": rate, "capped": capped}


def test_every_system_has_three_or_four_values_per_direction_and_size():
    for system in ("hostbroker-unix", "hostbroker-tcp", "redis", "nats", "rabbitmq"):
        for direction in ("produce", "consume"):
            for size in (100, 10240):
                values = sweep.grid(system, direction, size)
                assert 3 <= len(values) <= 4
                assert list(values) == sorted(set(values))


def test_hostbroker_unix_and_tcp_share_a_grid_and_sizes_pick_theirs():
    assert sweep.grid("hostbroker-unix", "produce", 100) == (200, 1000, 5000)
    assert sweep.grid("hostbroker-tcp", "produce", 10240) == (20, 50, 100)
    assert sweep.grid("redis", "consume", 1000) == (100, 1000, 10_000)
    assert sweep.grid("redis", "consume", 1001) == (10, 100, 1000)
    assert sweep.meaning("redis", "consume") == "XREAD COUNT"


def test_summarise_takes_the_median_best_and_worst_of_the_repeats():
    runs = [run("redis", 1000, 100.0), run("redis", 1000, 300.0), run("redis", 1000, 200.0),
            run("redis", 100, 50.0, capped=True)]
    assert sweep.summarise(runs) == [
        {"system": "redis", "size": 100, "phase": "produce", "value": 1000, "repeats": 3,
         "median": 200.0, "best": 300.0, "worst": 100.0, "spread": 3.0, "capped": False},
        {"system": "redis", "size": 100, "phase": "produce", "value": 100, "repeats": 1,
         "median": 50.0, "best": 50.0, "worst": 50.0, "spread": 1.0, "capped": True},
    ]


def test_the_best_value_is_the_one_with_the_highest_median_not_the_fastest_single_run():
    runs = [run("redis", 10, 1000.0), run("redis", 10, 100.0), run("redis", 10, 100.0),
            run("redis", 100, 200.0), run("redis", 100, 200.0), run("redis", 100, 190.0)]
    chosen = sweep.best(sweep.summarise(runs))
    assert list(chosen) == [("redis", 100, "produce")]
    assert chosen[("redis", 100, "produce")]["value"] == 100


def test_a_tie_goes_to_the_value_tried_first():
    runs = [run("nats", 1000, 5.0), run("nats", 100, 5.0)]
    assert sweep.best(sweep.summarise(runs))[("nats", 100, "produce")]["value"] == 1000


def test_ratios_are_hostbroker_best_over_each_peer_best_per_size_and_phase():
    runs = [run("hostbroker-unix", 200, 400.0), run("hostbroker-unix", 1000, 900.0),
            run("redis", 100, 300.0), run("redis", 1000, 150.0),
            run("hostbroker-unix", 1 << 20, 800.0, phase="consume"),
            run("redis", 1000, 400.0, phase="consume"),
            run("nats", 1000, 10.0, phase="consume")]
    out = sweep.ratios(sweep.best(sweep.summarise(runs)), ["hostbroker-unix"], ["redis", "nats"])
    by = {(r["phase"], r["peer"]): r for r in out}
    assert set(by) == {("produce", "redis"), ("consume", "redis"), ("consume", "nats")}
    assert by[("produce", "redis")]["ratio"] == pytest.approx(3.0)
    assert by[("produce", "redis")]["hostbroker_value"] == 1000
    assert by[("produce", "redis")]["peer_value"] == 100
    assert by[("consume", "redis")]["ratio"] == pytest.approx(2.0)
    assert by[("consume", "nats")]["ratio"] == pytest.approx(80.0)


def test_interleaved_runs_value_i_of_every_system_before_value_i_plus_1_and_rotates():
    order = list(sweep.interleaved(["redis", "nats"], "consume", 100, 2))
    assert order == [
        (0, 0, "redis", 100), (0, 0, "nats", 100), (0, 1, "redis", 1000),
        (0, 1, "nats", 1000), (0, 2, "redis", 10_000), (0, 2, "nats", 10_000),
        (1, 0, "nats", 100), (1, 0, "redis", 100), (1, 1, "nats", 1000),
        (1, 1, "redis", 1000), (1, 2, "nats", 10_000), (1, 2, "redis", 10_000),
    ]
