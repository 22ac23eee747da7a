"""tools/bench/top.py: its timed refreshes of ``top`` against a real broker,
and the screen they keep when more partitions move than the screen lists."""

import importlib.util
import pathlib
import sys

_BENCH = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench"
sys.path.insert(0, str(_BENCH))  # it imports its neighbours (harness, metrics)
_spec = importlib.util.spec_from_file_location("bench_top", _BENCH / "top.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
harness = bench.harness


def test_refreshes_are_timed_and_the_screen_sums_what_it_does_not_list(tmp_path):
    from hostbroker.client.simple import SimpleClient
    from hostbroker.config import Config
    from hostbroker.log.message import encode_message_set
    from hostbroker.top import Source
    from hostbroker.top_render import TOP_PARTITIONS, render

    broker = harness.Broker(str(tmp_path), [])
    broker.start()
    try:
        bench.metrics._setup(broker, 3, 4, 0)  # 12 partitions, one message set in each
        source = Source(Config.build(overrides=[f"{k}={v}"
                                                for k, v in broker.settings.items()]))
        data = encode_message_set([b"m" * 100] * 10)
        every = [(f"bench-{t:04d}", p) for t in range(3) for p in range(4)]
        with SimpleClient(broker.uri("unix"), timeout=30) as client:
            figures = bench._refreshes(source, render, 2, 0.3,
                                       lambda: client.produce_many([(t, p, data)
                                                                    for t, p in every]))
    finally:
        broker.stop()
    for key in ("wall_ms", "cpu_ms", "read_ms", "draw_ms"):
        assert 0 < figures[f"{key}_median"] <= figures[f"{key}_max"]
    screen = figures["screen"]
    at = next(i for i, line in enumerate(screen) if line.startswith("partition"))
    listed = screen[at + 1:at + 1 + TOP_PARTITIONS]
    assert all(line.split()[0].startswith("bench-") for line in listed)
    assert screen[at + 1 + TOP_PARTITIONS].split()[:3] == [
        str(len(every) - TOP_PARTITIONS), "more", "partitions"]
