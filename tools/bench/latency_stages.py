"""Where does a running hostbroker's request time go? Its per-process stage counters.

Used by ``tools/bench/latency.py``. Reads the broker's process board the way
``hostbroker top --json`` does (``hostbroker.top.attach`` and ``sample``,
read-only) and sums each counter over the processes of one kind (processor,
handler, writer). The stage counters are ``wait_ns`` (a handler: ns requests
waited in request rings from the processor's enqueue to the handler's
pickup; a processor: ns answers waited in response rings), ``work_ns`` (ns
spent working in loop cycles), ``wakeups`` (times the process slept and was
woken), ``bells_rung``, ``bells_skipped`` (doorbells not rung because the
target was awake) and ``spin_hits`` (work found while spinning before
sleeping). A broker without them gives ``None`` for each: everything here
works with and without them.
"""

from __future__ import annotations

STAGES = ("wait_ns", "work_ns", "wakeups", "bells_rung", "bells_skipped", "spin_hits")
KINDS = ("processor", "handler", "writer")


class StageCounters:
    """The counters of one broker, found from the settings it was started with."""

    def __init__(self, settings: dict[str, str]):
        from hostbroker import top
        from hostbroker.config import Config

        config = Config.load(None, [f"{k}={v}" for k, v in settings.items()])
        self._top = top
        self.board, self.table, self.log_dirs = top.attach(config)
        self._procs: dict = {}

    def read(self) -> dict[str, dict[str, int | None]]:
        """``{kind: {counter: sum over the kind's processes}}`` (None: no such counter)."""
        reading = self._top.sample(self.board, self._procs)
        out: dict[str, dict[str, int | None]] = {}
        for row in reading["workers"]:
            kind = row["kind"]
            if kind not in KINDS:
                continue
            sums = out.setdefault(kind, {"requests": 0, **{s: None for s in STAGES}})
            counters = row["counters"]
            sums["requests"] += counters.get("requests", 0)
            for name in STAGES:
                if name in counters:
                    sums[name] = (sums[name] or 0) + counters[name]
        return out

    def close(self) -> None:
        for thing in (self.board, self.table):
            close = getattr(thing, "close", None)
            if close:
                close()


def delta(before: dict, after: dict) -> dict:
    """``after - before`` per kind and counter (None stays None)."""
    out = {}
    for kind, counters in after.items():
        old = before.get(kind, {})
        out[kind] = {name: None if value is None or old.get(name) is None
                     else value - old[name] for name, value in counters.items()}
    return out


def add(total: dict, more: dict) -> dict:
    """Counters summed over several phases' deltas."""
    for kind, counters in more.items():
        mine = total.setdefault(kind, {})
        for name, value in counters.items():
            if value is None:
                mine.setdefault(name, None)
            else:
                mine[name] = (mine.get(name) or 0) + value
    return total


def per_request(counters: dict, requests: int) -> dict:
    """What each kind spent per request: ``requests`` is the clients' count of requests
    in the phase (the same for every kind); the kind's own ``requests`` counter is kept."""
    out = {}
    for kind, c in counters.items():
        row = {"requests_counted": c.get("requests")}
        n = max(requests, 1)
        for name, unit, scale in (("wait_ns", "wait_us", 1e-3), ("work_ns", "work_us", 1e-3),
                                  ("wakeups", "wakeups", 1), ("bells_rung", "bells_rung", 1),
                                  ("bells_skipped", "bells_skipped", 1),
                                  ("spin_hits", "spin_hits", 1)):
            value = c.get(name)
            row[f"{unit}_per_request"] = None if value is None else round(value * scale / n, 3)
        out[kind] = row
    return out


def format_where(phase: str, table: dict) -> list[str]:
    """Lines of "where the time goes" for one phase (``per_request`` output)."""
    if not table:
        return [f"  {phase}: no counters read"]
    if all(v is None for row in table.values() for k, v in row.items()
           if k != "requests_counted"):
        return [f"  {phase}: this broker has no stage counters (wait_ns, work_ns, wakeups, "
                "bells_rung, bells_skipped, spin_hits)"]
    lines = []
    for kind in KINDS:
        row = table.get(kind)
        if not row:
            continue

        def cell(key: str, fmt: str) -> str:
            value = row.get(key)
            return "-" if value is None else format(value, fmt)

        lines.append(f"  {phase:18} {kind:9} ring wait {cell('wait_us_per_request', '.1f')} µs"
                     f"  work {cell('work_us_per_request', '.1f')} µs"
                     f"  wake-ups {cell('wakeups_per_request', '.2f')}"
                     f"  bells rung {cell('bells_rung_per_request', '.2f')}"
                     f" / skipped {cell('bells_skipped_per_request', '.2f')}"
                     f"  spin hits {cell('spin_hits_per_request', '.2f')}  (per request)")
    return lines
