"""The scrape's text: the column families written by our own loop parse
exactly as ``prometheus_client`` writes the same samples."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from hostbroker.metrics.exposition import ColumnFamily, label_string, label_value, render

HOSTILE = ['plain', 'a"b', 'back\\slash', 'new\nline', '} x 1\n# TYPE y counter',
           'ünïcode', 'lone \udcff surrogate', '', '\\n']


class _Collector:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return iter(self.families)


def _families(groups=HOSTILE):
    keys = [(t, p) for t in ("orders", "page.views", "x-y_z") for p in range(3)]
    labels = [label_string(("topic", "partition"), k) for k in keys]
    yield ColumnFamily("hostbroker_partition_in_bytes_total", "Bytes in.", "counter",
                       ("topic", "partition"), keys, labels, [i * 1000 for i in range(9)])
    yield ColumnFamily("hostbroker_partition_log_end_offset", "Log end\\offset\nsecond line.",
                       "gauge", ("topic", "partition"), keys, labels,
                       [None if i == 4 else 2**40 + i for i in range(9)])
    series = [(g, "t", 0) for g in groups]
    yield ColumnFamily("hostbroker_group_lag_bytes", "Lag.", "gauge",
                       ("group", "topic", "partition"), series,
                       [label_string(("group", "topic", "partition"), k) for k in series],
                       list(range(len(series))))
    g = GaugeMetricFamily("hostbroker_connections", "Connections.")
    g.add_metric([], 3)
    yield g
    h = HistogramMetricFamily("hostbroker_request_latency_seconds", "Latency.", labels=["api"])
    h.add_metric(["produce"], [("0.001", 2), ("0.01", 5), ("+Inf", 7)], 0.25)
    yield h


def _parsed(text: str):
    out = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = (family.type, family.documentation,
                            sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                                   for s in family.samples))
    return out


def _sanitized(value: str) -> str:
    """What a label value reads back as: lone surrogates written as \\uXXXX text."""
    return value.encode("utf-8", "backslashreplace").decode("ascii", "replace") if any(
        0xD800 <= ord(c) <= 0xDFFF for c in value) else value


def test_render_parses_as_generate_latest_of_the_same_samples():
    # the library cannot write a lone surrogate at all (it fails the scrape)
    groups = [g for g in HOSTILE if "lone" not in g]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(list(_families(groups))))
    library = _parsed(generate_latest(registry).decode("utf-8"))
    ours = _parsed(render(_families(groups)).decode("utf-8"))
    assert ours == library
    assert len(library) == 5


def test_hostile_label_values_read_back_whole():
    families = _parsed(render(_families()).decode("utf-8"))
    groups = {dict(labels)["group"]: value
              for _, labels, value in families["hostbroker_group_lag_bytes"][2]}
    assert groups == {_sanitized(g): float(i) for i, g in enumerate(HOSTILE)}
    # no line of a label value became a family or a sample of its own
    assert set(families) == {"hostbroker_partition_in_bytes", "hostbroker_partition_log_end_offset",
                             "hostbroker_group_lag_bytes", "hostbroker_connections",
                             "hostbroker_request_latency_seconds"}


def test_a_left_out_value_has_no_line_and_exact_integers_stay_exact():
    text = render(_families()).decode()
    lines = [line for line in text.splitlines()
             if line.startswith("hostbroker_partition_log_end_offset{")]
    assert len(lines) == 8
    assert f"{2**40 + 3}" in text  # written whole, not as 1.09951e+12


def test_label_value_escapes():
    assert label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert label_value("ok") == "ok"
    assert label_string(("topic", "partition"), ("t", 3)) == '{partition="3",topic="t"}'
    assert label_string((), ()) == ""
