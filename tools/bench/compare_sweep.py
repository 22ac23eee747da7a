"""Which setting is each system's best? The grids ``compare.py`` sweeps and the choice of the best.

Pure functions only (no processes, no servers): the grids of batch and
pipeline sizes tried for every system, direction and message size, and the
reduction of a sweep's repeated runs to one figure per setting (the median)
and to each system's best setting. ``tests/test_bench_compare.py`` tests them.
"""

from __future__ import annotations

import statistics

SMALL = 1000  # sizes up to this many bytes use the small-message grids

# system -> direction -> (what the value is, grid for small messages, grid for large)
GRIDS = {
    "hostbroker": {
        "produce": ("send_many() batch = message-set size (batch.size), 5 requests in flight",
                    (200, 1000, 5000), (20, 50, 100)),
        "consume": ("fetch.size bytes", (256 << 10, 1 << 20, 4 << 20),
                    (256 << 10, 1 << 20, 4 << 20)),
    },
    "redis": {
        "produce": ("XADD pipeline depth", (100, 1000, 5000), (10, 100, 500)),
        "consume": ("XREAD COUNT", (100, 1000, 10_000), (10, 100, 1000)),
    },
    "nats": {
        "produce": ("publish_async acks pending", (1000, 10_000, 50_000), (100, 1000, 5000)),
        "consume": ("pull fetch batch", (100, 1000, 10_000), (10, 100, 1000)),
    },
    "rabbitmq": {
        "produce": ("send_batch size (unconfirmed window 20 batches)", (100, 1000, 5000),
                    (10, 40, 90)),
        "consume": ("subscribe initial_credit (chunks)", (1, 10, 100), (1, 10, 100)),
    },
}


def family(system: str) -> str:
    """The grid a system uses: hostbroker-unix and hostbroker-tcp share one."""
    return "hostbroker" if system.startswith("hostbroker") else system


def grid(system: str, direction: str, size: int) -> tuple[int, ...]:
    """The values of ``system``'s swept setting for ``direction`` at ``size`` bytes."""
    _, small, large = GRIDS[family(system)][direction]
    return small if size <= SMALL else large


def meaning(system: str, direction: str) -> str:
    return GRIDS[family(system)][direction][0]


def interleaved(names: list[str], direction: str, size: int, repeats: int):
    """(repeat, index, system, value) in run order: value i of every system before value i+1.

    Each repeat starts with another system (the order rotates), so that no
    system always runs right after the same neighbour.
    """
    width = max(len(grid(s, direction, size)) for s in names)
    for rep in range(repeats):
        k = rep % len(names)
        for i in range(width):
            for system in names[k:] + names[:k]:
                values = grid(system, direction, size)
                if i < len(values):
                    yield rep, i, system, values[i]


def summarise(runs: list[dict]) -> list[dict]:
    """One entry per (system, size, phase, value): median, best and worst of its repeats.

    ``runs`` are dicts with at least system, size, phase, value, msgs_per_s.
    The entries come out in the order their first run appears.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["system"], r["size"], r["phase"], r["value"]), []).append(r)
    out = []
    for (system, size, phase, value), rs in groups.items():
        rates = [r["msgs_per_s"] for r in rs]
        out.append({"system": system, "size": size, "phase": phase, "value": value,
                    "repeats": len(rs), "median": statistics.median(rates),
                    "best": max(rates), "worst": min(rates),
                    "spread": max(rates) / min(rates) if min(rates) > 0 else None,
                    "capped": any(r.get("capped") for r in rs)})
    return out


def best(summary: list[dict]) -> dict[tuple, dict]:
    """(system, size, phase) -> the summary entry with the highest median.

    Ties go to the value tried first, so the choice does not depend on order
    within a dict.
    """
    chosen: dict[tuple, dict] = {}
    for entry in summary:
        key = (entry["system"], entry["size"], entry["phase"])
        if key not in chosen or entry["median"] > chosen[key]["median"]:
            chosen[key] = entry
    return chosen


def ratios(chosen: dict[tuple, dict], hostbrokers: list[str],
           peers: list[str]) -> list[dict]:
    """hostbroker-best / peer-best (by medians) for every size and phase both have."""
    out = []
    for (system, size, phase), peer in sorted(chosen.items(), key=lambda kv: kv[0][1:]):
        if system not in peers:
            continue
        for hb in hostbrokers:
            mine = chosen.get((hb, size, phase))
            if mine is not None and peer["median"] > 0:
                out.append({"size": size, "phase": phase, "hostbroker": hb, "peer": system,
                            "ratio": mine["median"] / peer["median"],
                            "hostbroker_msgs_per_s": mine["median"],
                            "peer_msgs_per_s": peer["median"],
                            "hostbroker_value": mine["value"], "peer_value": peer["value"]})
    return out
