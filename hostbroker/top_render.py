"""The screen of ``hostbroker top``: two readings (:func:`hostbroker.top.sample`)
turned into at most 100 columns of text.

Owns only formatting: rates per second between the two readings in human
units (``1.2k``, ``3.4M`` a second; ``512B``, ``1.2KiB``, ``3.4MiB`` a
second), names cut to their column, and the sections in order: the broker
line, a row per process, the APIs (requests and errors a second, mean and
p99 latency from the histogram's buckets), the partitions taking the most
bytes in (and one line summing the others that moved), then the log dirs
and what is under-replicated or offline. Pure: no shared memory, no clock,
no terminal.
"""

from __future__ import annotations

import heapq

from hostbroker import cpulatency, cpusched
from hostbroker.shm.procs import COUNTER_NAMES
from hostbroker.shm.stats import LATENCY_BOUNDS

WIDTH = 100
TOP_PARTITIONS = 10
LISTED = 10  # under-replicated and offline partitions named one a line
# (header, width, counter, how shown): a rate of a counter, or a gauge as it is
_PROCESS_COLUMNS = (
    ("req/s", 7, "requests", "rate"),
    ("in/s", 9, "bytes_in", "bytes"),
    ("out/s", 9, "bytes_out", "bytes"),
    ("msg/s", 7, "messages_in", "rate"),
    ("err/s", 6, "errors", "rate"),
    ("conns", 6, "connections", "gauge"),
    ("parked", 7, "fetch_parked", "gauge"),
    ("wake/s", 7, "wakeups", "rate"),
)

assert {column[2] for column in _PROCESS_COLUMNS} <= set(COUNTER_NAMES)


def human(value: float) -> str:
    """A count (a second) in a few characters: 950, 9.5k, 95k, 1.2M, 3.4G (up to E)."""
    value = max(0.0, value)
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6),
                        ("k", 1e3)):
        if value >= scale * 0.9995:
            scaled = value / scale
            return f"{scaled:.1f}{unit}" if scaled < 9.95 else f"{scaled:.0f}{unit}"
    return f"{value:.0f}" if value >= 9.95 or value == 0 else f"{value:.1f}"


def human_bytes(value: float) -> str:
    """Bytes (a second) in a few characters: 512B, 1.2KiB, 34MiB, 1.0GiB (up to EiB)."""
    value = max(0.0, value)
    for unit, scale in (("EiB", 2 ** 60), ("PiB", 2 ** 50), ("TiB", 2 ** 40), ("GiB", 2 ** 30),
                        ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if value >= scale * 0.9995:
            scaled = value / scale
            return f"{scaled:.1f}{unit}" if scaled < 9.95 else f"{scaled:.0f}{unit}"
    return f"{value:.0f}B"


def cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters at most, its end replaced by ``~`` when cut."""
    return text if len(text) <= width else text[:width - 1] + "~"


def cut_path(path: str, width: int) -> str:
    """``path`` in ``width`` characters at most: cut in the middle when too
    long (``~`` where), so its start and its last part still show."""
    if len(path) <= width:
        return path
    head = width // 3
    return path[:head] + "~" + path[len(path) - (width - head - 1):]


def _rate(now: int, old: int | None, seconds: float) -> float:
    """(now - old) a second; 0 without an earlier value (or time between)."""
    if old is None or seconds <= 0:
        return 0.0
    return max(0, now - old) / seconds


def _cell(kind: str, value: float) -> str:
    if kind == "bytes":
        return human_bytes(value)
    return human(value)


def render(reading: dict, previous: dict | None, seconds: float) -> str:
    """The screen; rates are per second since ``previous`` (none: 0)."""
    lines = [cut(_broker_line(reading), WIDTH)]
    lines.extend(_process_table(reading, previous, seconds))
    lines.extend(_api_table(reading.get("api"), (previous or {}).get("api"), seconds))
    lines.extend(_partition_table(reading.get("partitions"), (previous or {}).get("partitions"),
                                  seconds))
    lines.extend(_log_dir_table(reading.get("log_dirs", [])))
    short = reading.get("under_replicated_partitions", [])
    for t, p in short[:LISTED]:
        lines.append(cut(f"UNDER-REPLICATED partition {t}-{p}", WIDTH))
    lines.extend(_more("UNDER-REPLICATED", short))
    for path in reading.get("offline_log_dirs", []):
        lines.append(cut(f"OFFLINE log dir {path}", WIDTH))
    offline = reading.get("offline_partitions", [])
    for p in offline[:LISTED]:
        if "replica" in p:
            lines.append(cut(f"OFFLINE replica {p['replica']} in {p['log_dir']}", WIDTH))
        else:
            lines.append(cut(f"OFFLINE partition {p['topic']}-{p['partition']} in "
                             f"{p['log_dir']}", WIDTH))
    lines.extend(_more("OFFLINE", offline))
    return "\n".join(lines)


def _more(what: str, listed: list) -> list[str]:
    """One line counting what is past the first ``LISTED`` (a failed disk of
    5,000 partitions is not 5,000 lines; ``--json`` lists them all)."""
    if len(listed) <= LISTED:
        return []
    return [f"{what} {len(listed) - LISTED:,} more partitions (top --json lists them all)"]


def _broker_line(reading: dict) -> str:
    target = reading.get("cpu_wakeup_latency_us")
    held = ("" if target is None else "  CPU wake-up latency " + (
        "not bounded" if target >= cpulatency.DEFAULT_US else f"{target} µs"))
    policy = reading.get("scheduling")
    realtime = f"  {policy}" if policy and policy.split()[0] in (
        cpusched.POLICY_NAMES.values()) else ""
    return (f"hostbroker {reading['broker_state']}  supervisor pid {reading['supervisor_pid']}"
            + held + realtime)


def _process_table(reading: dict, previous: dict | None, seconds: float) -> list[str]:
    """A row per process: 14 + 8 + 5 + 6 + 58 + 9 = 100 columns."""
    before = {(r["kind"], r["index"]): r["counters"] for r in (previous or {}).get("workers", [])}
    lines = [f"{'process':<14}{'pid':>8}{'cpu%':>5}{'rss':>6}"
             + "".join(f"{h:>{w}}" for h, w, _, _ in _PROCESS_COLUMNS) + f"{'wait/req':>9}"]
    for r in reading["workers"]:
        name = cut(r["name"] or f"{r['kind']}-{r['index']}", 13)
        old = before.get((r["kind"], r["index"]))
        counters = r["counters"]
        cells = []
        for _, width, counter, how in _PROCESS_COLUMNS:
            if how == "gauge":
                cells.append(f"{human(counters.get(counter, 0)):>{width}}")
            else:
                rate = _rate(counters.get(counter, 0), None if old is None else old.get(counter, 0),
                             seconds)
                cells.append(f"{_cell(how, rate):>{width}}")
        cpu = "" if r.get("cpu_percent") is None else f"{r['cpu_percent']:.0f}"
        rss = "" if r.get("rss_bytes") is None else _mem(r["rss_bytes"])
        lines.append(f"{name:<14}{r['pid']:>8}{cpu:>5}{rss:>6}" + "".join(cells)
                     + f"{_wait_per_request(counters, old):>9}")
    return lines


def _mem(n: int) -> str:
    """Resident memory in 5 characters: 45M, 1.2G."""
    if n >= 2 ** 30:
        return f"{n / 2 ** 30:.1f}G"
    return f"{n / 2 ** 20:.0f}M"


def _wait_per_request(now: dict, old: dict | None) -> str:
    """How long a request (or answer) waited in this worker's input rings,
    on average since the previous reading (µs, or ms past 10 ms); blank
    without requests."""
    requests = now.get("requests", 0) - (old or {}).get("requests", 0)
    if not old or requests <= 0:
        return ""
    us = (now.get("wait_ns", 0) - old.get("wait_ns", 0)) / requests / 1000
    return f"{us / 1000:,.0f}ms" if us >= 10_000 else f"{us:,.0f}us"


def _api_table(api: dict | None, old: dict | None, seconds: float) -> list[str]:
    """A row per API that answered since the previous reading (or ever, on
    the first): requests and errors a second, mean and p99 latency over the
    interval (p99 from the buckets, as Prometheus' histogram_quantile)."""
    if not api:
        return []
    old = old or {}
    rows = []
    for name, now in sorted(api.items()):
        was = old.get(name)
        if was is not None and now["requests"] == was["requests"]:
            continue  # nothing since the previous reading
        was = was or {"requests": 0, "errors": 0, "latency_sum_ns": 0,
                      "buckets": [0] * len(now["buckets"])}
        requests = now["requests"] - was["requests"]
        errors = now["errors"] - was["errors"]
        buckets = [a - b for a, b in zip(now["buckets"], was["buckets"])]
        mean = (_ms((now["latency_sum_ns"] - was["latency_sum_ns"]) / requests / 1e6)
                if requests > 0 else "")
        per = seconds if seconds > 0 and name in old else 0
        rows.append(f"{cut(name, 23):<24}{human(requests / per if per else 0):>10}"
                    f"{human(errors / per if per else 0):>10}{mean:>12}"
                    f"{_quantile(0.99, buckets, requests):>12}"
                    f"{human(now['requests']):>10}{human(now['errors']):>10}")
    if not rows:
        return []
    return [f"{'api':<24}{'req/s':>10}{'err/s':>10}{'mean':>12}{'p99':>12}"
            f"{'requests':>10}{'errors':>10}", *rows]


def _ms(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:.2f}s"
    return f"{ms:.1f}ms" if ms < 100 else f"{ms:.0f}ms"


def _quantile(q: float, buckets: list[int], requests: int) -> str:
    """The ``q`` quantile of the latencies the cumulative ``buckets`` hold
    (linear within its bucket); ``>2.5s`` past the last bound; blank without
    requests."""
    if requests <= 0:
        return ""
    rank = q * requests
    lower, below = 0.0, 0
    for bound, count in zip(LATENCY_BOUNDS, buckets):
        if count >= rank:
            inside = count - below
            share = (rank - below) / inside if inside > 0 else 1.0
            return _ms((lower + (bound - lower) * share) * 1000)
        lower, below = bound, count
    return f">{LATENCY_BOUNDS[-1]:g}s"


def _partition_table(partitions: list | None, old: list | None, seconds: float) -> list[str]:
    """The ``TOP_PARTITIONS`` partitions taking the most bytes in since the
    previous reading (on the first, in all), then most bytes out; past them,
    one line sums the rest that took or gave anything (at 10,000 partitions
    the screen stays this size). The four deltas of each partition are taken
    once and the first rows picked by ``heapq.nlargest`` (no sort of them all)."""
    if not partitions:
        return []
    before = {(p["topic"], p["partition"]): p for p in old or ()}
    per = seconds if seconds > 0 else 0
    moved = []  # (bytes in, bytes out, order, partition, its four deltas, a rate or not)
    for order, p in enumerate(partitions):
        key = (p["topic"], p["partition"])
        was = before.get(key)
        if was == p:
            continue  # (most of 10,000: nothing since the previous reading)
        deltas = tuple(p[c] - (was[c] if was is not None and was[c] <= p[c] else 0)
                       for c in _PARTITION_DELTAS)
        if any(deltas[1:]):  # bytes in, bytes out or fetches
            moved.append((deltas[1], deltas[2], -order, key, deltas,
                          bool(per) and was is not None))
    if not moved:
        return []
    rows = heapq.nlargest(TOP_PARTITIONS, moved)
    lines = [f"{'partition (most bytes in)':<52}{'msg/s':>12}{'in/s':>12}{'out/s':>12}"
             f"{'fetch/s':>12}"]
    for *_, (topic, partition), deltas, rated in rows:
        lines.append(_partition_line(cut(f"{topic}-{partition}", 51),
                                     [d / per if rated else 0.0 for d in deltas]))
    if len(moved) > len(rows):
        shown = {row[3] for row in rows}
        rest = [0.0] * len(_PARTITION_DELTAS)
        for *_, key, deltas, rated in moved:
            if rated and key not in shown:
                rest = [r + d / per for r, d in zip(rest, deltas)]
        lines.append(_partition_line(f"{len(moved) - len(rows):,} more partitions", rest))
    return lines


_PARTITION_DELTAS = ("messages_in", "bytes_in", "bytes_out", "fetches")


def _partition_line(name: str, rates: list[float]) -> str:
    messages, bytes_in, bytes_out, fetches = rates
    return (f"{name:<52}{human(messages):>12}{human_bytes(bytes_in):>12}"
            f"{human_bytes(bytes_out):>12}{human(fetches):>12}")


def _log_dir_table(rows: list[dict]) -> list[str]:
    """The ``log dirs`` table, for a broker with two or more (one dir holds no
    replicas across dirs)."""
    if len(rows) < 2:
        return []
    table = [("log dir", "id", "state", "replicas", "leaders", "under-replicated")]
    # (a path of 40, an id of 10, and the rest: 100 columns at most)
    table += [(cut_path(r["path"] or "-", 40), str(r["id"]) if r["id"] > 0 else "-", r["state"],
               _count(r["replicas"]), _count(r["leaders"]), _count(r["under_replicated"]))
              for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)
