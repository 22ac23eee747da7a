"""tools/bench/ab_settings.py: its percentiles, summaries and arguments."""

import importlib.util
import pathlib
import sys

import pytest

_BENCH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench"
sys.path.insert(0, str(_BENCH))  # it imports its neighbours (harness, latency_loads)
_spec = importlib.util.spec_from_file_location("ab_settings", _BENCH / "ab_settings.py")
ab = importlib.util.module_from_spec(_spec)
sys.modules["ab_settings"] = ab  # its client processes are spawned with its functions
_spec.loader.exec_module(ab)


def test_percentiles_by_nearest_rank_in_ms():
    ns = [i * 1_000_000 for i in range(1000, 0, -1)]  # 1 .. 1000 ms, any order
    assert ab.percentiles_ms(ns) == (500.0, 990.0, 999.0)
    assert ab.percentiles_ms([2_500_000]) == (2.5, 2.5, 2.5)


def test_latencies_take_the_lowest_as_best_and_rates_the_highest():
    lat = ab.summarize([(1.0, 5.0, 9.0), (2.0, 4.0, 8.0), (3.0, 6.0, 7.0)])
    assert lat == {"median": (2.0, 5.0, 8.0), "best": (1.0, 4.0, 7.0)}
    assert ab.summarize([10.0, 30.0, 20.0]) == {"median": 20.0, "best": 30.0}


def test_arguments():
    args = ab.parse_args(["sync", "--b", "produce.direct.answers=false", "--rounds", "2"])
    assert (args.load, args.a, args.b, args.rounds) == (
        "sync", [], ["produce.direct.answers=false"], 2)
    with pytest.raises(SystemExit):
        ab.parse_args(["rtt", "--seconds", "0"])
    with pytest.raises(SystemExit):
        ab.parse_args(["nope"])
    args = ab.parse_args(["sync10k", "--batch", "25", "--socket", "unix"])
    assert (args.load, args.batch, args.socket) == ("sync10k", 25, "unix")
    assert ab.parse_args(["large"]).batch == 100 and ab.parse_args(["large"]).socket == "tcp"
    for bad in (["sync10k", "--batch", "0"], ["large", "--socket", "pipe"]):
        with pytest.raises(SystemExit):
            ab.parse_args(bad)


def test_clients_only_for_the_rate_loads():
    assert ab.parse_args(["sync1", "--clients", "4"]).clients == 4
    assert ab.parse_args(["pipe"]).clients == 1
    for bad in (["e2e", "--clients", "2"], ["sync", "--clients", "0"], ["sync", "--clients", "65"]):
        with pytest.raises(SystemExit):
            ab.parse_args(bad)


def test_clients_side_by_side_add_up_to_what_the_log_holds(tmp_path):
    """Two spawned clients against a real broker: their summed rate is what
    went into the partition over the time they ran."""
    from hostbroker.client.simple import SimpleClient
    from tests.integration.broker import Broker

    broker = Broker(tmp_path).start()
    try:
        with SimpleClient(broker.tcp) as client:
            client.create_topic(ab.TOPIC, 1)
            start = client.offsets(ab.TOPIC, 0)[0]
            rate = ab.measure_clients("sync1", broker.tcp, 1.0, 2)
            end = client.offsets(ab.TOPIC, 0)[0]
    finally:
        broker.stop()
    requests = (end - start) / (100 + 10)  # one 100-byte message a request, its header 10
    assert requests == int(requests) and requests > 0
    # each client's rate is over its own run of about a second
    assert 0.7 * requests <= rate <= 1.3 * requests, (rate, requests)


def test_commit_load_commits_for_real(tmp_path):
    import os

    from hostbroker.client.simple import SimpleClient
    from tests.integration.broker import Broker

    assert ab.parse_args(["commit", "--clients", "8"]).clients == 8
    broker = Broker(tmp_path).start()
    try:
        with SimpleClient(broker.tcp) as client:
            client.create_topic(ab.TOPIC, 1)
            assert client.offset_fetch(f"ab-{os.getpid()}", [(ab.TOPIC, 0)])[0].offset == -1
            rate = ab.run_commit(broker.tcp, 0.5)
            (stored,) = client.offset_fetch(f"ab-{os.getpid()}", [(ab.TOPIC, 0)])
    finally:
        broker.stop()
    assert rate > 0 and stored.offset == 1


def test_offset_fetch_and_heartbeat_loads_time_real_answers(tmp_path):
    import os

    from hostbroker.client.simple import SimpleClient
    from tests.integration.broker import Broker
    from tests.integration.coordinator_wire import GroupWire

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    broker = Broker(tmp_path / "a").start()
    try:
        with SimpleClient(broker.tcp) as client:
            client.create_topic(ab.TOPIC, 1)
        for load in ("offset-fetch", "heartbeat"):
            p50, p99, p999 = ab.measure(load, broker.tcp, 0.3)
            assert 0 < p50 <= p99 <= p999 < 1000, (load, p50, p99, p999)
        with GroupWire(broker.tcp) as wire:  # the member left after its heartbeats
            assert wire.describe(f"ab-{os.getpid()}").members == ()
    finally:
        broker.stop()
    # a broker that refuses the member's join (its session is too long) fails the load
    broker = Broker(tmp_path / "b", **{"group.max.session.timeout.ms": "5000"}).start()
    try:
        with pytest.raises(SystemExit, match="heartbeat: the join was answered"):
            ab.run_group_rtt(broker.tcp, "heartbeat", 0.2)
    finally:
        broker.stop()


def test_partitions_for_the_loads_over_several():
    assert ab.parse_args(["e2e-parts"]).partitions == 8
    assert ab.parse_args(["fetch-parts", "--partitions", "64"]).partitions == 64
    assert ab.parse_args(["fetch-parts", "--fill", "70"]).fill == 70
    assert ab.parse_args(["fetch-parts"]).fill == 1
    for bad in (["fetch-parts", "--partitions", "0"], ["e2e-parts", "--partitions", "1001"],
                ["fetch-parts", "--fill", "0"]):
        with pytest.raises(SystemExit):
            ab.parse_args(bad)


def test_a_tree_must_hold_the_package(tmp_path):
    repo = _BENCH.parent.parent
    assert ab.parse_args(["rtt", "--a-tree", str(repo)]).a_tree == str(repo)
    assert ab.parse_args(["rtt"]).a_tree is None
    with pytest.raises(SystemExit):
        ab.parse_args(["rtt", "--a-tree", str(tmp_path)])


def test_a_broker_from_another_tree_runs_under_that_trees_code(tmp_path, capsys):
    """A's ``hostbroker serve`` imports the package from ``--a-tree``: a tree
    whose package says so at import (a copy of this one) is the one that ran."""
    import shutil

    repo = _BENCH.parent.parent
    tree = tmp_path / "tree"
    shutil.copytree(repo / "hostbroker", tree / "hostbroker",
                    ignore=shutil.ignore_patterns("__pycache__"))
    marker = tmp_path / "imported"
    with open(tree / "hostbroker" / "__init__.py", "a") as f:
        f.write(f"\nopen({str(marker)!r}, 'a').write('x')\n")
    assert ab.main(["rtt", "--a-tree", str(tree), "--rounds", "1", "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert f"A (defaults, {tree})" in out and "B (defaults)" in out
    assert marker.exists()  # A's supervisor and workers imported the copy


def test_the_loads_over_several_partitions_read_every_one(tmp_path):
    """Against a real broker: the end-to-end consumer gets the messages sent
    to all the partitions, and a FETCH of them all is timed."""
    from hostbroker.client.simple import SimpleClient
    from tests.integration.broker import Broker

    broker = Broker(tmp_path).start()
    try:
        with SimpleClient(broker.tcp) as client:
            client.create_topic(ab.PARTS_TOPIC, 3)
            result = ab.run_e2e(broker.tcp, ab.PARTS_TOPIC, 0.3, 100, partitions=3)
            assert result["received"] == result["sent"] == 30
            ends = [client.offsets(ab.PARTS_TOPIC, p)[0] for p in range(3)]
            # 10 a partition, after the one each that run_e2e starts from
            assert ends == [11 * (100 + 10)] * 3
            p50, p99, p999 = ab.run_fetch_parts(broker.tcp, 3, 0.2)
            assert 0 < p50 <= p99 <= p999
            with pytest.raises(SystemExit):  # a partition it cannot read is a broken setup
                ab.run_fetch_parts(broker.tcp, 4, 0.2)
    finally:
        broker.stop()


def test_pairs_of_produces_are_sent_together(tmp_path):
    """``--pair-every``: every Nth PRODUCE goes out with the next one, so the
    broker sees a connection that pipelines now and then (each pair reaches
    the handler, where lone ones go past it), and nothing is lost."""
    from hostbroker.client.simple import SimpleClient
    from tests.integration.broker import Broker

    assert ab.parse_args(["e2e", "--pair-every", "500"]).pair_every == 500
    assert ab.parse_args(["e2e-parts"]).pair_every == 0
    for bad in (["e2e", "--pair-every", "-1"], ["rtt", "--pair-every", "2"]):
        with pytest.raises(SystemExit):
            ab.parse_args(bad)
    broker = Broker(tmp_path).start()
    try:
        with SimpleClient(broker.tcp) as client:
            client.create_topic(ab.TOPIC, 1)
        before = broker.counter("handler", "requests")
        result = ab.run_e2e(broker.tcp, ab.TOPIC, 0.3, 100, pair_every=5)
        assert result["received"] == result["sent"] == 30
        assert broker.counter("handler", "requests") - before >= 5
    finally:
        broker.stop()
