"""The text a scrape answers: Prometheus' text format, version 0.0.4.

Owns: :class:`ColumnFamily`, the metric family of the per-partition and
per-group series, and :func:`render`, which writes a registry's families.

Why a family of our own: at 10,000 partitions a scrape has over 100,000
per-partition samples. ``prometheus_client`` builds a ``Sample`` per value
and ``generate_latest`` formats each one (sorting and escaping its labels
again for every family): about 0.6 s of CPU for such a scrape, far past
the budget (a scrape at 15 s intervals under 1 % of a core). A
:class:`ColumnFamily` is a ``prometheus_client`` ``Metric`` (its
``samples`` are there for whoever asks, built on demand) that also keeps
its series as columns: one label string per series, shared by every family
of the same series (escaped once per scrape), and a list of values.
:func:`render` writes those as ``name{labels} value`` lines in one join and
every other family through ``prometheus_client``'s own ``generate_latest``,
so the two agree on the format (a test parses both and compares).

Label values are escaped as the format says (backslash, double quote, line
feed); a value that cannot be UTF-8 (a lone surrogate from a hostile group
id) has those code points written as ``\\uXXXX`` text instead of failing
the scrape.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def label_value(value: str) -> str:
    """``value`` escaped for a label (between double quotes)."""
    text = value.translate(_ESCAPES)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("ascii", "replace")
    return text


def label_string(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="x",b="y"}`` for label ``names`` (sorted, as generate_latest writes
    them) and their ``values``; "" for no labels."""
    if not names:
        return ""
    pairs = sorted(zip(names, values))
    return "{" + ",".join(f'{n}="{label_value(str(v))}"' for n, v in pairs) + "}"


class ColumnFamily(Metric):
    """A gauge or counter family over series given as label strings.

    ``labels`` is the family's label names (for :attr:`samples`), ``keys``
    the series (tuples of label values, same order), ``label_strings`` the
    same series as :func:`label_string` wrote them (shared between families
    over the same series), ``values`` one number per series (None: the
    series is left out of this family).
    """

    def __init__(self, name: str, documentation: str, typ: str, labels: Sequence[str],
                 keys: Sequence[tuple], label_strings: Sequence[str],
                 values: Sequence[float | int | None]):
        if typ == "counter" and name.endswith("_total"):
            name = name[:-len("_total")]
        super().__init__(name, documentation, typ)
        self.label_names = tuple(labels)
        self.keys = keys
        self.label_strings = label_strings
        self.values = values

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name

    @property
    def samples(self) -> list[Sample]:  # type: ignore[override]
        name = self.sample_name
        return [Sample(name, dict(zip(self.label_names, map(str, key))), float(value))
                for key, value in zip(self.keys, self.values) if value is not None]

    @samples.setter
    def samples(self, value) -> None:  # Metric.__init__ sets it; ours are the columns
        pass

    def text(self) -> str:
        name = self.sample_name
        kind = "untyped" if self.type == "unknown" else self.type
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        head = f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"
        lines = [f"{name}{labels} {value}\n"
                 for labels, value in zip(self.label_strings, self.values) if value is not None]
        return head + "".join(lines)


class _One:
    """A collector of one family: what generate_latest takes."""

    def __init__(self, metric: Metric):
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return (self.metric,)


def render(families: Iterable[Metric]) -> bytes:
    """The text format of ``families`` (a registry's ``collect()``): each
    :class:`ColumnFamily` written from its columns, every other family by
    ``generate_latest``."""
    out = []
    for metric in families:
        if isinstance(metric, ColumnFamily):
            out.append(metric.text().encode("utf-8"))
        else:
            out.append(generate_latest(_One(metric)))
    return b"".join(out)
