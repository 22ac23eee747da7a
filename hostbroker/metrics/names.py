"""Every metric ``/metrics`` exposes: name, type, labels and help, one table.

:data:`METRICS` is the single declaration. The collectors build their
families from it (:func:`spec`), docs/operations.md's metrics reference is
generated from it (``python -m hostbroker.metrics.names``; a test holds the
page to it), and the example Grafana dashboard may name only what it holds.

Names follow Prometheus' conventions: the prefix ``hostbroker_``, base
units (``_bytes``, ``_seconds``), plural, ending the name or right before
``_total`` (``hostbroker_partition_in_bytes_total``, as
``node_network_receive_bytes_total``), ``_total`` on counters and only on
them, ``_info`` on the one info gauge (always 1), snake_case labels. Offsets are the
broker's byte offsets, so an offset difference is a size in bytes (a
partition's size, a group's lag).

The ``api`` label of a request kind is the name its API stats go by
(``protocol/names.api_name``), and the latency histogram's buckets
are the API stats' own (``shm/stats.LATENCY_BOUNDS``): the collectors take
both from there, so neither is declared twice.
"""

from __future__ import annotations

from collections import namedtuple

PREFIX = "hostbroker_"

MetricSpec = namedtuple("MetricSpec", "name type labels help group")

_P = ("topic", "partition")
_W = ("kind", "index")
_D = ("log_dir", "dir_id")
_G = ("group", "topic", "partition")

_ROWS = (
    # per partition
    ("partition_messages_in_total", "counter", _P, "partition",
     "Message-set entries produced to the partition: a compressed wrapper counts once, "
     "however many messages it holds (a follower's copies are not counted)."),
    ("partition_in_bytes_total", "counter", _P, "partition",
     "Bytes of message sets produced to the partition."),
    ("partition_out_bytes_total", "counter", _P, "partition",
     "Bytes of the partition sent in FETCH answers (consumers and followers)."),
    ("partition_fetches_total", "counter", _P, "partition",
     "FETCH answers that carried the partition (consumers and followers)."),
    ("partition_log_start_offset", "gauge", _P, "partition",
     "The partition's log start offset (bytes)."),
    ("partition_log_end_offset", "gauge", _P, "partition",
     "The partition's log end offset: the offset the next message gets (bytes)."),
    ("partition_high_watermark", "gauge", _P, "partition",
     "Where consumers stop: the high watermark of a replicated partition, the log end "
     "offset of an unreplicated one (bytes)."),
    ("partition_size_bytes", "gauge", _P, "partition",
     "The partition's log end offset minus its log start offset."),
    ("partition_under_replicated", "gauge", _P, "partition",
     "1 while a replicated partition this broker leads has an ISR short of its replicas "
     "(or, for replicas across log dirs, no leader); 0 otherwise. Replicated partitions "
     "only."),
    ("partition_offline", "gauge", _P, "partition",
     "1 while the partition answers STORAGE_ERROR (its log dir failed, or its files "
     "were found damaged at start); 0 otherwise."),
    ("partition_leader", "gauge", _P, "partition",
     "1 where this broker leads the partition and it is online (every unreplicated "
     "partition it holds online), 0 where it holds a follower replica or the partition "
     "is offline (partition_offline says which)."),
    # per API
    ("requests_total", "counter", ("api",), "api",
     "Requests answered, by request kind (counted by the processor that read them)."),
    ("request_errors_total", "counter", ("api",), "api",
     "Answers that carried an error code (top-level or of any partition), by request kind."),
    ("request_latency_seconds", "histogram", ("api",), "api",
     "Time from a request's arrival at its processor to its answer being handed back "
     "for writing, by request kind."),
    # per process
    ("process_cpu_seconds_total", "counter", _W, "process",
     "User and system CPU time of the process."),
    ("process_resident_memory_bytes", "gauge", _W, "process",
     "Resident memory of the process."),
    ("process_restarts_total", "counter", _W, "process",
     "Times the supervisor replaced the worker since the broker started."),
    ("process_ring_wait_seconds_total", "counter", _W, "process",
     "Time records waited in the worker's input rings, from enqueue to pickup, summed."),
    ("process_wakeups_total", "counter", _W, "process",
     "Times the worker slept and was woken by its doorbell or a socket."),
    ("process_up", "gauge", _W, "process",
     "1 while the worker is READY (serving), 0 while it starts, stops or is replaced."),
    # broker
    ("connections", "gauge", (), "broker",
     "Client connections the processors hold."),
    ("fetch_long_polls", "gauge", (), "broker",
     "FETCH requests parked waiting for data (min_bytes / max_wait_ms), wherever they "
     "wait: processors, handlers and the partitions' writers."),
    ("log_dir_online", "gauge", _D, "broker",
     "1 while the log dir is online, 0 while it is offline or reopening. dir_id is -1 "
     "for a dir without an id (one-dir and cluster brokers)."),
    ("log_dir_replicas", "gauge", _D, "broker",
     "Replicas across log dirs held on the log dir."),
    ("log_dir_under_replicated", "gauge", _D, "broker",
     "Partitions the log dir leads whose ISR is short of their replicas."),
    ("broker_info", "gauge", ("broker_id", "version", "mode"), "broker",
     "Always 1: the broker's id, hostbroker version and mode (standalone, logdirs: "
     "standalone with replicas across log dirs, or cluster)."),
    # groups
    ("group_committed_offset", "gauge", _G, "group",
     "The group's committed offset for the partition, as OFFSET_FETCH answers it."),
    ("group_lag_bytes", "gauge", _G, "group",
     "The partition's high watermark (log end offset when unreplicated: where "
     "consumers stop) minus the group's committed offset, 0 when the committed offset "
     "is past it; only for partitions this broker leads (or holds unreplicated)."),
    ("group_members", "gauge", ("group",), "group",
     "Members of the group (0 for a group with committed offsets only)."),
    # the scrape itself
    ("metrics_partitions_omitted", "gauge", (), "scrape",
     "Partitions whose series this scrape left out (past http.metrics.max.partitions)."),
    ("metrics_groups_omitted", "gauge", (), "scrape",
     "Groups whose offsets and lag this scrape left out (past http.metrics.max.groups)."),
    ("metrics_scrape_seconds", "gauge", (), "scrape",
     "Wall time hb-http spent on this scrape before this line."),
)

METRICS: dict[str, MetricSpec] = {
    PREFIX + name: MetricSpec(PREFIX + name, kind, labels, help_, group)
    for name, kind, labels, group, help_ in _ROWS
}

GROUP_TITLES = {
    "partition": "Per partition",
    "api": "Per request kind",
    "process": "Per process",
    "broker": "Broker",
    "group": "Consumer groups",
    "scrape": "The scrape",
}


def spec(name: str) -> MetricSpec:
    """The declaration of ``name`` (with or without the prefix); KeyError for none."""
    return METRICS[name if name.startswith(PREFIX) else PREFIX + name]


def exposed_names(metric: MetricSpec) -> tuple[str, ...]:
    """The sample names a family shows in the text format (a histogram's
    ``_bucket``, ``_sum`` and ``_count``)."""
    if metric.type == "histogram":
        return tuple(metric.name + s for s in ("_bucket", "_sum", "_count"))
    return (metric.name,)


def markdown_table() -> str:
    """docs/operations.md's metrics reference: a table per group of metrics."""
    out = []
    for group, title in GROUP_TITLES.items():
        out += [f"**{title}**", "", "| metric | type | labels | meaning |", "|---|---|---|---|"]
        for m in METRICS.values():
            if m.group == group:
                labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
                out.append(f"| `{m.name}` | {m.type} | {labels} | {m.help} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
