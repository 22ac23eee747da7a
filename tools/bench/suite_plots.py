"""The suite's plots, drawn from its JSON report with matplotlib (Agg, no display).

Owns: :func:`write_all`, which writes ``throughput.png`` (messages/s and MB/s
against each variable of the table, hostbroker beside the naive broker at
the base point), ``resources.png`` (each broker's CPU and memory over the
whole run, the cells marked), ``latency.png`` (p50/p99/p99.9 of both
brokers) and, when the peers ran, ``peers.png`` (each system at its best).
"""

from __future__ import annotations

import os

VARIABLES = (("producers", "producers"), ("size", "message size (bytes)"),
             ("partitions", "partitions"), ("rf", "replication factor"),
             ("consumers", "consumers"))
BASE_KEYS = ("producers", "size", "partitions", "rf", "consumers")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "figure.dpi": 80})
    return plt


def _save(plt, fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _series(report: dict, variable: str, acks: int = 1) -> list[dict]:
    """The cells that vary ``variable`` from the base point, in its order (the
    replication cells of ``acks``)."""
    base = report["suite"]["base"]
    kind = "consume" if variable == "consumers" else "produce"
    out = []
    for c in report["table"]:
        # the replication cells come from the three brokers, the others from one
        if c["kind"] != kind or (c["broker"] == "standalone") == (variable == "rf"):
            continue
        if c.get("acks", 1) != acks:
            continue
        others = [k for k in BASE_KEYS if k != variable and k != "partitions"]
        if kind == "produce" and c["partitions"] != base["partitions"] and variable != "partitions":
            continue
        if all(c[k] == base[k] for k in others):
            out.append(c)
    return sorted(out, key=lambda c: c[variable])


def throughput(report: dict, path: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(2, 5, figsize=(13, 5))
    naive = report.get("naive", {})
    for col, (variable, label) in enumerate(VARIABLES):
        cells = _series(report, variable)
        top, bottom = axes[0][col], axes[1][col]
        if cells:
            xs = [c[variable] for c in cells]
            name = "hostbroker, 3 brokers" if variable == "rf" else "hostbroker"
            top.plot(xs, [c["msgs_per_s"] for c in cells], "o-", label=name)
            bottom.plot(xs, [c["mb_per_s"] for c in cells], "o-", label=name)
            every = _series(report, variable, acks=-1) if variable == "rf" else []
            if every:
                xs = [c[variable] for c in every]
                top.plot(xs, [c["msgs_per_s"] for c in every], "^--", label=name + ", acks=-1")
                bottom.plot(xs, [c["mb_per_s"] for c in every], "^--",
                            label=name + ", acks=-1")
            if variable == "size":
                top.set_xscale("log")
                bottom.set_xscale("log")
            for what, r in (naive.items() if variable != "rf" else ()):
                kind, size = what.split()[0], int(what.split()[1])
                if (variable == "consumers") == (kind == "consume") and (
                        variable == "size" or size == report["suite"]["base"]["size"]):
                    x = size if variable == "size" else 1
                    top.plot([x], [r["naive"]["msgs_per_s"]], "s", color="gray",
                             label="naive broker")
                    bottom.plot([x], [r["naive"]["mb_per_s"]], "s", color="gray",
                                label="naive broker")
        top.set_title(("consume: " if variable == "consumers" else "produce: ") + label)
        bottom.set_xlabel(label)
        top.set_ylim(bottom=0)
        bottom.set_ylim(bottom=0)
        handles, labels = top.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        if unique:
            top.legend(unique.values(), unique.keys(), fontsize=7)
    axes[0][0].set_ylabel("messages/s")
    axes[1][0].set_ylabel("MB/s (10^6 payload bytes)")
    _save(plt, fig, path)


def resources(report: dict, path: str) -> None:
    plt = _plt()
    fig, (cpu, mem) = plt.subplots(2, 1, figsize=(13, 5), sharex=True)
    for target, points in report.get("series", {}).items():
        ts = [p[0] for p in points]
        cpu.plot(ts, [p[1] for p in points], lw=0.8, label=target)
        mem.plot(ts, [p[2] for p in points], lw=0.8, label=target)
    for c in report["table"]:
        cpu.axvspan(c["t0"], c["t1"], color="tab:blue", alpha=0.07)
    cpu.axhline(report["machine"]["nproc"], color="gray", ls=":", lw=0.8)
    cpu.set_ylabel("CPU (cores busy)")
    mem.set_ylabel("memory (MB, PSS of the tree)")
    mem.set_xlabel("seconds into the run (shaded: the kept repeat of each cell of the table; "
                   "the peers' part, at the end, is not sampled)")
    cpu.legend(fontsize=7, loc="upper right")
    cpu.set_ylim(bottom=0)
    mem.set_ylim(bottom=0)
    _save(plt, fig, path)


def latency(report: dict, path: str) -> None:
    plt = _plt()
    loads = list(report.get("latency", {}).items())
    fig, axes = plt.subplots(1, max(1, len(loads)), figsize=(9, 3.2), squeeze=False)
    for ax, (what, by) in zip(axes[0], loads):
        names = list(by)
        width = 0.8 / max(1, len(names))
        for i, name in enumerate(names):
            xs = [j + i * width for j in range(3)]
            ax.bar(xs, [by[name][k] for k in ("p50", "p99", "p99.9")], width, label=name)
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(3)],
                      ["p50", "p99", "p99.9"])
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.set_title(what)
        ax.legend(fontsize=7)
    _save(plt, fig, path)


def peers(report: dict, path: str) -> None:
    plt = _plt()
    best = report["peers"]["best"]
    keys = sorted({(b["phase"], b["size"]) for b in best})
    systems = list(dict.fromkeys(b["system"] for b in best))
    fig, axes = plt.subplots(1, len(keys), figsize=(3 * len(keys), 3.2), squeeze=False)
    for ax, (phase, size) in zip(axes[0], keys):
        rows = {b["system"]: b for b in best if (b["phase"], b["size"]) == (phase, size)}
        names = [s for s in systems if s in rows]
        ax.bar(range(len(names)), [rows[s]["median"] for s in names],
               color=["tab:blue" if s.startswith("hostbroker") else "tab:gray" for s in names])
        ax.set_xticks(range(len(names)), [s.replace("hostbroker-", "hb ") for s in names],
                      rotation=30)
        ax.set_title(f"{phase} {size} B, best setting")
        ax.set_ylabel("messages/s")
    _save(plt, fig, path)


def write_all(report: dict, out: str) -> list[str]:
    """Draw every plot the report has data for into ``out``; their file names."""
    done = []
    for name, draw, has in (("throughput.png", throughput, report["table"]),
                            ("resources.png", resources, report.get("series")),
                            ("latency.png", latency, report.get("latency")),
                            ("peers.png", peers, report.get("peers", {}).get("best"))):
        if has:
            draw(report, os.path.join(out, name))
            done.append(name)
    return done
