"""tools/bench/cost_predict.py: the cost model's predictions and the settings it chooses."""

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench" / "cost_predict.py"
_spec = importlib.util.spec_from_file_location("cost_predict", _PATH)
cp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cp)

US = 1e-6
COSTS = {"processor": 0.5 * US, "handler": 1.0 * US, "writer": 0.25 * US, "client": 0.25 * US}


def test_one_core_is_bound_by_the_total_cost_clients_included():
    p = cp.predict(COSTS, cores=1, processors=2, handlers=2, writers=1,
                   connections=1, partitions=1)
    assert p["binds"] == "cores"
    assert p["msgs_per_s"] == 1 / (2.0 * US)
    assert p["bounds"]["handlers"] == 1 / (1.0 * US)  # one connection: one handler


def test_clients_elsewhere_leave_their_share_of_the_cores():
    p = cp.predict(COSTS, cores=1, processors=2, handlers=2, writers=1, clients_on_host=False)
    assert p["msgs_per_s"] == 1 / (1.75 * US)


def test_one_connection_stops_at_its_slowest_stage_however_many_cores():
    p = cp.predict(COSTS, cores=64, processors=8, handlers=8, writers=8,
                   connections=1, partitions=1)
    assert (p["binds"], p["msgs_per_s"]) == ("handlers", 1 / (1.0 * US))
    assert cp.single_connection_limit(COSTS) == (1 / (1.0 * US), "handler")


def test_many_connections_spread_over_the_workers_of_each_kind():
    p = cp.predict(COSTS, cores=64, processors=4, handlers=8, writers=2)
    assert p["bounds"]["processors"] == 4 / (0.5 * US)
    assert p["bounds"]["handlers"] == 8 / (1.0 * US)
    assert p["bounds"]["writers"] == 2 / (0.25 * US)
    assert p["bounds"]["cores"] == 64 / (2.0 * US)
    assert (p["binds"], p["msgs_per_s"]) == ("processors", 8e6)


def test_disks_bound_sustained_produce_by_their_bytes():
    p = cp.predict(COSTS, cores=64, processors=32, handlers=32, writers=8,
                   disk_bytes_per_s=1e9, log_bytes_per_message=10_250)
    assert p["binds"] == "disks"
    assert p["msgs_per_s"] == 8 * 1e9 / 10_250


def test_a_kind_that_costs_nothing_never_binds():
    p = cp.predict({"processor": 1 * US, "client": 1 * US}, cores=4, processors=1,
                   handlers=1, writers=1)
    assert p["bounds"]["writers"] == cp.INF and p["bounds"]["handlers"] == cp.INF
    assert (p["binds"], p["msgs_per_s"]) == ("processors", 1e6)


def test_mix_adds_the_costs_of_each_kind():
    assert cp.mix({"processor": 1.0, "writer": 2.0}, {"processor": 0.5, "client": 1.0}) == {
        "processor": 1.5, "writer": 2.0, "client": 1.0}


def test_choose_workers_takes_the_fewest_that_reach_the_ceiling():
    workloads = {"w": {"costs": {"processor": 1 * US, "handler": 2 * US, "writer": 0.1 * US},
                       "log_bytes": 110, "produce": False}}
    pick = cp.choose_workers(workloads, cores=12, disks=1, disk_bytes_per_s=None,
                             clients_on_host=False)
    # cores bind at 12 / 3.1 µs; N / 1 µs and H / 2 µs must reach 98 % of it
    assert (pick["processors"], pick["handlers"]) == (4, 8)
    assert pick["predictions"]["w"]["binds"] == "cores"


def test_ring_count_and_ring_bytes_within_a_budget():
    mib = cp.MIB
    assert cp.ring_count(2, 3, 4) == 2 * 2 * 3 + 2 * 3 * 4
    assert cp.answer_ring_memory(2, 4, 8 * mib) == 8 * (1 + 4) * mib  # ans 1 MiB, put 4 MiB
    assert cp.answer_ring_memory(2, 4, 65536) == 8 * 2 * 65536
    assert cp.choose_ring_bytes(10, 1000 * mib) == 16 * mib
    assert cp.choose_ring_bytes(100, 1000 * mib) == 8 * mib
    assert cp.choose_ring_bytes(10_000, 1000 * mib) == 1 * mib  # never below the smallest


def test_spin_only_when_every_worker_and_the_clients_have_a_core():
    assert cp.spin_advice(workers=20, client_cores=4.2, cores=32) == 50
    assert cp.spin_advice(workers=28, client_cores=4.2, cores=32) == 0


def test_several_log_dirs_on_one_disk_add_writers_not_disk_bytes():
    costs = {"writer": 1 * US}
    one = cp.predict(costs, cores=64, processors=8, handlers=8, writers=8, disks=8,
                     disk_bytes_per_s=1e9, log_bytes_per_message=110)
    two = cp.predict(costs, cores=64, processors=8, handlers=8, writers=16, disks=8,
                     disk_bytes_per_s=1e9, log_bytes_per_message=110)
    assert (one["binds"], one["msgs_per_s"]) == ("writers", 8e6)
    assert two["bounds"]["writers"] == 16e6
    assert two["bounds"]["disks"] == one["bounds"]["disks"] == 8 * 1e9 / 110
