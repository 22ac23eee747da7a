"""What does a large host reach? The cost model: measured CPU per message -> predicted throughput
and settings.

Pure functions, no I/O; used by ``tools/bench/cost_model.py`` (which measures
the costs) and tested in ``tests/test_bench_cost_model.py``.

A workload (produce or fetch, one message size) costs ``c_k`` CPU seconds per
message in each process kind ``k``: processor ``p``, handler ``h``, writer
``w`` and the client ``c``. On a host with ``C`` cores, ``N`` processors,
``H`` handlers, ``W`` writers (one per disk), ``M`` client connections and
``P`` partitions (spread over the disks), the predicted messages/s is::

    X = min( min(N, M) / c_p,                 processors
             min(H, M) / c_h,                 handlers (a connection has one)
             min(W, P) / c_w,                 writers (a partition has one)
             M / c_c,                         the clients themselves
             W * D / b,                       disks, sustained produce only
             C / (c_p + c_h + c_w [+ c_c]) )  cores (c_c when clients share them)

with ``D`` one disk's sustained write bytes/s and ``b`` log bytes per message.
One connection (M = P = 1) is served by one processor, one handler and, for
one partition, one writer, each a single thread of Python: it stops at
``1 / max(c_p, c_h, c_w, c_c)`` however many cores there are. A term whose
cost is zero (the writer on fetch) does not bind.
"""

from __future__ import annotations

import math

KINDS = ("processor", "handler", "writer")
INF = float("inf")
MIB = 1 << 20


def predict(costs: dict[str, float], *, cores: float, processors: int, handlers: int,
            writers: int, connections: float = INF, partitions: float = INF,
            clients_on_host: bool = True, disk_bytes_per_s: float | None = None,
            log_bytes_per_message: float = 0.0, disks: int | None = None) -> dict:
    """Predicted messages/s and the binding resource.

    ``costs``: CPU seconds per message for ``processor``, ``handler``,
    ``writer`` and ``client`` (missing kinds cost nothing).
    ``disk_bytes_per_s`` (one disk, sustained) bounds the writers' total when
    given with ``log_bytes_per_message``; pass it for sustained produce only.
    ``disks`` (default: one per writer) are fewer than the writers when a
    disk holds several log dirs.
    Returns ``{"msgs_per_s", "binds", "bounds": {name: msgs/s}}``.
    """
    c = {k: max(0.0, costs.get(k, 0.0)) for k in (*KINDS, "client")}
    bounds: dict[str, float] = {}

    def bound(name: str, units: float, cost: float) -> None:
        bounds[name] = units / cost if cost > 0 else INF

    bound("processors", min(processors, connections), c["processor"])
    bound("handlers", min(handlers, connections), c["handler"])
    bound("writers", min(writers, partitions), c["writer"])
    bound("clients", connections, c["client"])
    if disk_bytes_per_s and log_bytes_per_message > 0:
        spindles = min(disks or writers, writers, partitions)
        bounds["disks"] = spindles * disk_bytes_per_s / log_bytes_per_message
    total = c["processor"] + c["handler"] + c["writer"] + (c["client"] if clients_on_host else 0)
    bound("cores", cores, total)
    binds = min(bounds, key=lambda k: bounds[k])
    return {"msgs_per_s": bounds[binds], "binds": binds, "bounds": bounds}


def single_connection_limit(costs: dict[str, float]) -> tuple[float, str]:
    """What one connection to one partition reaches with cores to spare: its slowest stage."""
    stages = {k: costs.get(k, 0.0) for k in (*KINDS, "client")}
    kind = max(stages, key=lambda k: stages[k])
    return (1 / stages[kind] if stages[kind] > 0 else INF), kind


def _share(value: float, ceiling: float) -> float:
    """value / ceiling, 1 where nothing bounds the workload (both infinite)."""
    return 1.0 if math.isinf(ceiling) or ceiling <= 0 else value / ceiling


def mix(*costs: dict[str, float]) -> dict[str, float]:
    """The costs of doing several workloads once per message (one produce and one fetch)."""
    out: dict[str, float] = {}
    for c in costs:
        for kind, value in c.items():
            out[kind] = out.get(kind, 0.0) + value
    return out


def choose_workers(workloads: dict[str, dict], *, cores: int, disks: int,
                   disk_bytes_per_s: float | None, clients_on_host: bool = True,
                   dirs_per_disk: int = 1,
                   good_enough: float = 0.98, max_workers: int | None = None) -> dict:
    """The fewest processors + handlers that get (nearly) the most out of ``cores``.

    ``workloads``: name -> ``{"costs": {...}, "log_bytes": b, "produce": bool}``
    (``produce``: the disks bound it). The answer is the smallest N + H (ties:
    fewer processors) with which every workload reaches ``good_enough`` of
    what the best N and H (up to ``max_workers``, default ``cores``, each)
    give it; fewer processes mean fewer wake-ups and context switches, which
    the model does not count. Many connections and partitions are assumed.
    """
    limit = max_workers or cores

    def run(n: int, h: int) -> dict[str, dict]:
        return {name: predict(w["costs"], cores=cores, processors=n, handlers=h,
                              writers=disks * dirs_per_disk, disks=disks,
                              clients_on_host=clients_on_host,
                              disk_bytes_per_s=disk_bytes_per_s if w["produce"] else None,
                              log_bytes_per_message=w["log_bytes"])
                for name, w in workloads.items()}

    ceiling = {name: r["msgs_per_s"] for name, r in run(limit, limit).items()}
    for total in range(2, 2 * limit + 1):
        for n in range(max(1, total - limit), min(limit, total - 1) + 1):
            preds = run(n, total - n)
            if all(_share(preds[w]["msgs_per_s"], ceiling[w]) >= good_enough for w in preds):
                return {"processors": n, "handlers": total - n, "writers": disks * dirs_per_disk,
                        "predictions": preds}
    raise AssertionError("N = H = limit reaches the ceiling")  # pragma: no cover


def _share(value: float, ceiling: float) -> float:
    """value / ceiling, 1 where nothing bounds the workload (both infinite)."""
    return 1.0 if math.isinf(ceiling) or ceiling <= 0 else value / ceiling


def ring_count(processors: int, handlers: int, writers: int) -> int:
    """Rings of ``ring.bytes`` the supervisor creates: req + resp per (processor,
    handler), app + res per (handler, writer) (``workers/plan.py``, ``ring_pairs``)."""
    return 2 * processors * handlers + 2 * handlers * writers


def answer_ring_memory(processors: int, writers: int, ring_bytes: int) -> int:
    """Bytes of the rings between each processor and each writer: ``ans``
    (writer -> processor) 1 MiB and ``put`` (processor -> writer) 4 MiB, or
    ``ring.bytes`` if smaller (``workers/plan.py``, ``ring_bytes``)."""
    return processors * writers * (min(ring_bytes, 1 * MIB) + min(ring_bytes, 4 * MIB))


def choose_ring_bytes(rings: int, budget_bytes: int, largest: int = 16 * MIB,
                      smallest: int = 1 * MIB) -> int:
    """The largest power of two from ``smallest`` to ``largest`` (the default) whose
    rings fit ``budget_bytes`` of shared memory (``smallest`` if none does)."""
    size = largest
    while size > smallest and rings * size > budget_bytes:
        size //= 2
    return size


def spin_advice(workers: int, client_cores: float, cores: int, spin_us: int = 50) -> int:
    """``worker.spin.us``: spinning keeps a worker on a core for ``spin_us`` after each
    busy round, so it only pays when every worker (and the clients' cores) can
    have a core of its own; otherwise 0."""
    return spin_us if workers + math.ceil(client_cores) <= cores else 0
