"""What did a suite run measure? Its JSON report as the short table on stdout and as
the Markdown tables of docs/benchmarks.md (``suite.py --tables FILE``).

Pure functions of the report (no processes, no files): :func:`short` for the
terminal, :func:`markdown` for the page, one table per question.
"""

from __future__ import annotations

PEER_LABELS = {"hostbroker-unix": "hostbroker (Unix socket)", "redis": "Redis Streams",
               "nats": "NATS JetStream", "rabbitmq": "RabbitMQ Streams"}


def _cells(report: dict) -> list[tuple[str, dict]]:
    """The table's cells in reading order, each with its label."""
    base = report["suite"]["base"]
    standalone = [c for c in report["table"] if c["broker"] == "standalone"]
    produce = [c for c in standalone if c["kind"] == "produce"]
    out = []
    for variable, label in (("producers", "producers {}"), ("size", "size {:,} B"),
                            ("partitions", "partitions {}")):
        others = [k for k in ("producers", "size", "partitions") if k != variable]
        for c in sorted((c for c in produce if all(c[k] == base[k] for k in others)),
                        key=lambda c: c[variable]):
            out.append((label.format(c[variable]), c))
    for c in sorted((c for c in report["table"] if c["broker"] != "standalone"),
                    key=lambda c: (-c.get("acks", 1), c["rf"])):
        out.append((f"replication factor {c['rf']} (3 brokers), acks={c.get('acks', 1)}", c))
    for c in sorted((c for c in standalone if c["kind"] == "consume"),
                    key=lambda c: c["consumers"]):
        out.append((f"consumers {c['consumers']} ({c['partitions']} partitions)", c))
    return out


def _per_core(c: dict) -> str:
    return f"{c['msgs_per_s'] / c['cpu_cores']:,.0f}" if c["cpu_cores"] > 0 else "-"


def markdown(report: dict) -> str:
    m, s = report["machine"], report["suite"]
    disk = m.get("disk", {})
    lines = [f"Run: `{s['command']}`, {s['date']}, {s['seconds']:.0f} s, hostbroker "
             f"`{m['git']}`; {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB, "
             f"Linux {m['kernel']}, Python {m['python']}, disk {disk.get('device', '?')} "
             f"{disk.get('size', '')}; load average at the start "
             f"{', '.join(f'{x:.1f}' for x in m['loadavg_at_start'])}.", ""]
    lines += ["| cell (one variable from the base) | msgs/s | MB/s | broker CPU, cores | "
              "msgs/s per broker core | broker memory MB, mean / peak | repeats, msgs/s |",
              "|---|---|---|---|---|---|---|"]
    for label, c in _cells(report):
        reps = ", ".join(f"{r / 1000:,.0f} k" for r in c["repeats_msgs_per_s"])
        lines.append(f"| {label} | {c['msgs_per_s']:,.0f} | {c['mb_per_s']:.1f} | "
                     f"{c['cpu_cores']:.2f} | {_per_core(c)} | {c['mem_mb_mean']:.0f} / "
                     f"{c['mem_mb_peak']:.0f} | {reps}{' (capped)' if c['capped'] else ''} |")
    if report["naive"]:
        lines += ["", "| load | hostbroker msgs/s | naive msgs/s | hostbroker / naive | "
                      "broker CPU, cores: hostbroker / naive |", "|---|---|---|---|---|"]
        for what, r in report["naive"].items():
            h, n = r["hostbroker"], r["naive"]
            lines.append(f"| {what} | {h['msgs_per_s']:,.0f} | {n['msgs_per_s']:,.0f} | "
                         f"{r['ratio']:.2f} | {h['cpu_cores']:.2f} / {n['cpu_cores']:.2f} |")
    pc, sf = report["limits"]["pagecache"], report["limits"]["sendfile"]
    lines += ["", f"Machine: page-cache write {pc['fresh_file_mb_s']:,.0f} MB/s (fresh file), "
                  f"{pc['reused_file_mb_s']:,.0f} (over its own pages); disk "
                  f"{pc['fdatasync_fresh_file_mb_s'] or 0:,.0f} MB/s (`dd conv=fdatasync`); "
                  f"`sendfile` to a loopback socket {sf['unix_mb_s']:,.0f} MB/s (Unix), "
                  f"{sf['tcp_mb_s']:,.0f} (TCP)."]
    if report["raw"]:
        lines += ["", "| 10 KiB, wire protocol | produce MB/s | ÷ page-cache write | "
                      "fetch MB/s (CRCs checked) | ÷ sendfile |", "|---|---|---|---|---|"]
        for name, r in report["raw"].items():
            lines.append(f"| {name} | {r['produce_mb_per_s']:,.0f} | "
                         f"{r['produce_vs_pagecache']:.2f} | {r['fetch_mb_per_s']:,.0f} | "
                         f"{r['fetch_vs_sendfile']:.2f} |")
    if report["latency"]:
        lines += ["", "| latency, ms | broker | p50 | p99 | p99.9 | samples |",
                  "|---|---|---|---|---|---|"]
        for what, by in report["latency"].items():
            for name, v in by.items():
                lines.append(f"| {what} | {name} | {v['p50']:.3f} | {v['p99']:.3f} | "
                             f"{v['p99.9']:.3f} | {v['samples']:,} |")
    peers = report.get("peers") or {}
    if peers.get("best"):
        best = {(b["system"], b["phase"], b["size"]): b for b in peers["best"]}
        systems = list(dict.fromkeys(b["system"] for b in peers["best"]))
        lines += ["", "| msgs/s at best setting (setting) | "
                      + " | ".join(PEER_LABELS.get(x, x) for x in systems) + " |",
                  "|---" * (len(systems) + 1) + "|"]
        for phase, size in sorted({(b["phase"], b["size"]) for b in peers["best"]},
                                  key=lambda k: (k[1], k[0] != "produce")):
            row = [f"{phase} {size:,} B"]
            for x in systems:
                b = best.get((x, phase, size))
                row.append(f"{b['median']:,.0f} ({b['value']:,})" if b else "-")
            lines.append("| " + " | ".join(row) + " |")
        ratios = {}
        for r in peers.get("ratios", []):
            ratios.setdefault((r["phase"], r["size"]), []).append(
                f"{PEER_LABELS.get(r['peer'], r['peer'])} {r['ratio']:.1f} ×")
        lines += [""] + [f"- hostbroker ÷ peer, {phase} {size:,} B: {', '.join(v)}"
                         for (phase, size), v in ratios.items()]
    for line in report["skipped"]:
        lines.append(f"\nSkipped: {line}")
    return "\n".join(lines) + "\n"


def short(report: dict) -> str:
    s, mach = report["suite"], report["machine"]
    pc, sf = report["limits"]["pagecache"], report["limits"]["sendfile"]
    out = [f"hostbroker {mach['git']} on {mach['nproc']} CPUs ({mach['cpu_model']}), "
           f"{mach['ram_gib']} GiB; {s['mode']} run, {s['seconds']:.0f} s",
           f"machine: page cache {pc['fresh_file_mb_s']:.0f} MB/s, disk "
           f"{pc['fdatasync_fresh_file_mb_s'] or 0:.0f} MB/s, sendfile unix "
           f"{sf['unix_mb_s']:.0f} MB/s",
           f"{'cell':40} {'msgs/s':>11} {'MB/s':>8} {'cores':>6} {'MB mem':>7}"]
    for label, c in _cells(report):
        out.append(f"{label:40} {c['msgs_per_s']:>11,.0f} {c['mb_per_s']:>8.1f} "
                   f"{c['cpu_cores']:>6.2f} {c['mem_mb_peak']:>7.0f}")
    for what, r in report["naive"].items():
        out.append(f"{what}: hostbroker / naive = {r['ratio']:.2f}")
    for name, r in report["raw"].items():
        out.append(f"raw 10 KiB {name}: produce {r['produce_mb_per_s']:.0f} MB/s "
                   f"({r['produce_vs_pagecache']} of page cache), fetch "
                   f"{r['fetch_mb_per_s']:.0f} MB/s ({r['fetch_vs_sendfile']} of sendfile)")
    for what, by in report["latency"].items():
        for name, v in by.items():
            out.append(f"{what} {name}: p50 {v['p50']:.3f} p99 {v['p99']:.3f} "
                       f"p99.9 {v['p99.9']:.3f} ms")
    for r in (report.get("peers") or {}).get("ratios", []):
        out.append(f"{r['phase']} {r['size']} B: hostbroker / {r['peer']} = {r['ratio']:.2f}")
    out += [f"skipped: {line}" for line in report["skipped"]]
    return "\n".join(out)
