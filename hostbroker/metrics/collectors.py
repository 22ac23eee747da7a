"""The custom collectors of ``/metrics``: each reads one source the broker
already keeps and yields ``prometheus_client`` metric families named in
:mod:`hostbroker.metrics.names`.

=====================  ===================================================
collector              reads
=====================  ===================================================
``PartitionCollector``  the partition table (offsets, roles, ISRs, states)
                       and every process's partition stats
``ApiCollector``        every process's API stats (requests, errors, latency)
``ProcessCollector``    the process board, and psutil for CPU and memory
``BrokerCollector``     the process board's gauges, the log dir table
``GroupCollector``      group offsets through the broker (:mod:`.lag`), with
                       the partitions' ends from ``PartitionCollector``
=====================  ===================================================

They run in ``hb-http`` and take an ``HttpContext``
(:mod:`hostbroker.workers.http.context`): its read-only attachments and
the plan. Nothing here writes shared memory or blocks on the broker, except
the group offsets, read at most every ``http.metrics.lag.interval.ms``.

Partitions. A partition is one series, keyed ``(topic, partition)``, however
many slots of the table hold it (replicas across log dirs have a slot per
dir): the offsets are those of the slot that leads (else any online one,
else the first), the counters the sum over its slots (a follower's slot
counts the fetches it answered, never produced messages). Series are
sorted by topic and partition, and those past ``http.metrics.max.partitions``
are left out (``hostbroker_metrics_partitions_omitted``).

Reading 10,000 slots whole costs a scrape about 60 ms, so it is done only
for replicas and whenever the table changed: :class:`SlotNames` keeps which
partition each slot holds (a slot holds one partition, of one kind, from
its claim to its release, and both bump the table's generation), and the
offsets of unreplicated partitions come from ``PartitionTable.figures``
(strided reads, seqlock-checked). A slot being written when read is read
again; one left mid-write by a dead writer costs the scrape the table's
bounded wait once (``READ_STUCK_SECONDS``) and is left out of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psutil
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from hostbroker import __version__
from hostbroker.metrics.exposition import ColumnFamily, label_string
from hostbroker.metrics.lag import group_lag
from hostbroker.metrics.names import METRICS, spec
from hostbroker.shm import partitions as pt
from hostbroker.shm import procs
from hostbroker.shm.logdirs import LD_ONLINE, shown_state
from hostbroker.shm.stats import LATENCY_BOUNDS
from hostbroker.shm.table import FREE, TornSlotError
from hostbroker.protocol.names import api_name

_COUNTED_STATES = (pt.ONLINE, pt.OFFLINE)


def _family(name: str, labels=None) -> Metric:
    """An empty family of ``name`` as names.py declares it."""
    m = spec(name)
    if m.type == "counter":
        return CounterMetricFamily(m.name, m.help, labels=m.labels if labels is None else labels)
    if m.type == "histogram":
        return HistogramMetricFamily(m.name, m.help, labels=m.labels)
    return GaugeMetricFamily(m.name, m.help, labels=m.labels if labels is None else labels)


class _Described:
    """A collector whose ``describe`` names its families (the registry then
    refuses two collectors of one name)."""

    NAMES: tuple[str, ...] = ()

    def describe(self) -> Iterator[Metric]:
        for name in self.NAMES:
            yield _family(name)


# -- partitions ---------------------------------------------------------------

class SlotNames:
    """Which partition each slot of the table holds, and whether it is a
    replica: ``(topic, partition, replicated)`` per slot (None: FREE when
    read), and the partitions in sorted order with their slots.

    A slot keeps its partition and its kind (unreplicated, or a replica) from
    its claim to its release, and both bump the table's generation, so this
    is read again only when the generation moves (or a slot shows taken that
    was FREE): at 10,000 partitions a scrape then reads the offsets of
    unreplicated partitions with :meth:`PartitionTable.figures` (a few ms)
    instead of every slot whole."""

    def __init__(self, table: pt.PartitionTable):
        self.generation = table.generation
        self.slots: list[tuple[str, int, bool] | None] = []
        self.complete = True
        by_key: dict[tuple[str, int], list[int]] = {}
        for i in range(table.high_water):
            name = None
            if table.state(i) != FREE:
                try:
                    s = table.read(i)
                except TornSlotError:
                    self.complete = False  # its writer died mid-write: read again next time
                else:
                    if s.state != FREE:
                        name = (s.name, s.partition, s.role != pt.ROLE_PLAIN)
                        by_key.setdefault((s.name, s.partition), []).append(i)
            self.slots.append(name)
        self.complete = self.complete and table.generation == self.generation
        self.order = [(key, tuple(by_key[key])) for key in sorted(by_key)]

    def current(self, table: pt.PartitionTable, figures: list) -> bool:
        """Still what the table holds (``figures``: this scrape's)."""
        if not self.complete or table.generation != self.generation:
            return False
        if len(figures) > len(self.slots):
            return False
        slots = self.slots
        return all(slots[i] is not None for i, f in enumerate(figures) if f[0] != FREE)


class PartitionView:
    """One scrape's reading of the partition table: per ``(topic, partition)``
    in sorted order, ``slots`` (table slots), ``start``, ``end``, ``readable``
    (where consumers stop), ``leader``, ``offline`` and ``under`` (None for an
    unreplicated partition). ``topics`` maps each topic to its partitions.
    ``names``: the previous scrape's :class:`SlotNames`, used while current."""

    def __init__(self, table: pt.PartitionTable, names: SlotNames | None = None):
        figures = table.figures()
        if names is None or not names.current(table, figures):
            names = SlotNames(table)
            figures = table.figures()
        self.names = names
        self.rows_read = len(figures)
        self.keys: list[tuple[str, int]] = []
        self.slots: list[tuple[int, ...]] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.readable: list[int] = []
        self.leader: list[int] = []
        self.offline: list[int] = []
        self.under: list[int | None] = []
        self.topics: dict[str, list[int]] = {}
        counted = _COUNTED_STATES
        online_state = pt.ONLINE
        known = names.slots
        for key, slots in names.order:
            first = slots[0]
            if len(slots) == 1 and first < len(figures) and not known[first][2]:
                state, start, end, _ = figures[first]
                if state not in counted:
                    continue
                online = state == online_state
                row = (start, end, end, 1 if online else 0, 0 if online else 1, None)
            else:
                row = self._replicas(table, slots)
                if row is None:
                    continue
            self.keys.append(key)
            self.slots.append(slots)
            self.start.append(row[0])
            self.end.append(row[1])
            self.readable.append(row[2])
            self.leader.append(row[3])
            self.offline.append(row[4])
            self.under.append(row[5])
            self.topics.setdefault(key[0], []).append(key[1])

    @staticmethod
    def _replicas(table: pt.PartitionTable, slots: tuple[int, ...]):
        """(start, end, readable, leader, offline, under) of a partition held
        in several slots or as a replica, from its slots read whole; None when
        none is ONLINE or OFFLINE."""
        found = []
        for i in slots:
            try:
                s = table.read(i)
            except TornSlotError:
                continue  # its writer died mid-write; the replacement repairs it
            if s.state in _COUNTED_STATES:
                found.append(s)
        if not found:
            return None
        online = [s for s in found if s.state == pt.ONLINE]
        leading = [s for s in online if s.role == pt.ROLE_LEADER]
        rep = (max(leading, key=lambda s: s.leader_epoch) if leading
               else online[0] if online else found[0])
        offline = 0 if online else 1
        if rep.role == pt.ROLE_PLAIN:
            return (rep.start_offset, rep.end_offset, rep.readable_end, 1 - offline, offline,
                    None)
        # (a cluster follower leaves the figure to its leader's broker)
        under = 1 if (leading or rep.dirs_placed) and pt.under_replicated(found) else 0
        return (rep.start_offset, rep.end_offset, rep.readable_end, 1 if leading else 0,
                offline, under)

    def readable_end(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> where consumers stop, of every partition this
        broker leads or holds unreplicated and online."""
        return {k: r for k, r, lead, off in zip(self.keys, self.readable, self.leader,
                                                 self.offline) if lead and not off}


class PartitionCollector(_Described):
    """Per-partition offsets, states and counters (module docstring)."""

    NAMES = tuple(n for n, m in METRICS.items() if m.group == "partition") + (
        "hostbroker_metrics_partitions_omitted",)

    def __init__(self, context, max_partitions: int):
        self.context = context
        self.max_partitions = max_partitions
        self.view: PartitionView | None = None  # the last scrape's, for GroupCollector
        self._labels: dict[tuple[str, int], str] = {}

    def _label_strings(self, keys) -> list[str]:
        cache = self._labels
        if len(cache) > 2 * self.max_partitions + 1024:
            cache.clear()  # topics deleted and made again: start over
        out = []
        for key in keys:
            text = cache.get(key)
            if text is None:
                text = cache[key] = label_string(("topic", "partition"), key)
            out.append(text)
        return out

    def collect(self) -> Iterator[Metric]:
        view = self.view = PartitionView(self.context.table,
                                         self.view.names if self.view else None)
        n = min(len(view.keys), self.max_partitions)
        keys = view.keys[:n]
        labels = self._label_strings(keys)
        columns = _stat_columns(self.context.partition_stats(), view.rows_read, view.slots[:n])

        def family(name: str, values) -> ColumnFamily:
            m = spec(name)
            return ColumnFamily(m.name, m.help, m.type, m.labels, keys, labels, values)

        # the partition stats' columns, in their order (_stat_columns)
        for i, name in enumerate(("partition_messages_in_total", "partition_in_bytes_total",
                                  "partition_out_bytes_total", "partition_fetches_total")):
            yield family(name, columns[i])
        yield family("partition_log_start_offset", view.start[:n])
        yield family("partition_log_end_offset", view.end[:n])
        yield family("partition_high_watermark", view.readable[:n])
        yield family("partition_size_bytes", [e - s for s, e in zip(view.start[:n], view.end[:n])])
        yield family("partition_under_replicated", view.under[:n])
        yield family("partition_offline", view.offline[:n])
        yield family("partition_leader", view.leader[:n])
        omitted = _family("metrics_partitions_omitted")
        omitted.add_metric([], len(view.keys) - n)
        yield omitted


def _stat_columns(stats, rows: int, slots: list[tuple[int, ...]]) -> list[list[int]]:
    """The four partition stats columns, one value per series: each series'
    slots summed over every process's table."""
    tables = [t for _, t in stats]
    if not tables:
        return [[0] * len(slots) for _ in range(4)]
    from hostbroker.shm.stats import COLUMN_COUNT, partition_totals

    flat = partition_totals(tables, rows)
    width = COLUMN_COUNT
    out: list[list[int]] = [[], [], [], []]
    m_in, b_in, b_out, fetches = out
    for series in slots:
        if len(series) == 1:
            at = series[0] * width
            m_in.append(flat[at])
            b_in.append(flat[at + 1])
            b_out.append(flat[at + 2])
            fetches.append(flat[at + 3])
        else:
            sums = [sum(flat[s * width + c] for s in series) for c in range(4)]
            m_in.append(sums[0])
            b_in.append(sums[1])
            b_out.append(sums[2])
            fetches.append(sums[3])
    return out


# -- requests -----------------------------------------------------------------

class ApiCollector(_Described):
    """Requests, errors and the latency histogram per request kind, summed
    over every process that records them."""

    NAMES = ("hostbroker_requests_total", "hostbroker_request_errors_total",
             "hostbroker_request_latency_seconds")

    def __init__(self, context):
        self.context = context

    def collect(self) -> Iterator[Metric]:
        from hostbroker.shm.stats import merge_api

        merged = merge_api(t.snapshot() for _, t in self.context.api_stats())
        requests = _family("requests_total")
        errors = _family("request_errors_total")
        latency = _family("request_latency_seconds")
        bounds = [repr(float(b)) for b in LATENCY_BOUNDS]
        for key in sorted(merged):
            count, failed, sum_ns, buckets = merged[key]
            name = api_name(key)
            requests.add_metric([name], count)
            errors.add_metric([name], failed)
            latency.add_metric([name], [*zip(bounds, buckets), ("+Inf", count)], sum_ns / 1e9)
        yield requests
        yield errors
        yield latency


# -- processes ----------------------------------------------------------------

def kind_names() -> dict[int, str]:
    """Board kind code -> kind name (the supervisor's numbering)."""
    return dict(procs.KIND_NAMES)


class ProcessCollector(_Described):
    """CPU, memory, restarts, ring waits, wake-ups and liveness of every
    worker on the process board, and CPU and memory of the supervisor."""

    NAMES = tuple(n for n, m in METRICS.items() if m.group == "process")

    def __init__(self, context):
        self.context = context
        self.kinds = kind_names()
        self._procs: dict[int, psutil.Process] = {}

    def _psutil(self, pid: int) -> tuple[float, int] | None:
        """(cpu seconds, rss bytes) of ``pid``, None when it cannot be read."""
        if pid <= 0:
            return None
        p = self._procs.get(pid)
        try:
            if p is None or not p.is_running():  # (a pid taken again by another process)
                p = self._procs[pid] = psutil.Process(pid)
            with p.oneshot():
                cpu = p.cpu_times()
                return cpu.user + cpu.system, p.memory_info().rss
        except psutil.Error:
            self._procs.pop(pid, None)
            return None

    def collect(self) -> Iterator[Metric]:
        board = self.context.board
        f = {name: _family(name) for name in self.NAMES}
        live = set()
        supervisor = board.supervisor_pid
        rows = [r for r in board.snapshot() if not r.get("torn")]
        for row in rows:
            labels = [self.kinds.get(row["kind"], str(row["kind"])), str(row["index"])]
            counters = row["counters"]
            f["hostbroker_process_restarts_total"].add_metric(labels, max(0, row["epoch"] - 1))
            f["hostbroker_process_ring_wait_seconds_total"].add_metric(
                labels, counters["wait_ns"] / 1e9)
            f["hostbroker_process_wakeups_total"].add_metric(labels, counters["wakeups"])
            f["hostbroker_process_up"].add_metric(
                labels, 1 if row["state"] == procs.WorkerState.READY else 0)
            read = self._psutil(row["pid"])
            if read is not None:
                live.add(row["pid"])
                f["hostbroker_process_cpu_seconds_total"].add_metric(labels, read[0])
                f["hostbroker_process_resident_memory_bytes"].add_metric(labels, read[1])
        read = self._psutil(supervisor)
        if read is not None:
            live.add(supervisor)
            f["hostbroker_process_cpu_seconds_total"].add_metric(["supervisor", "0"], read[0])
            f["hostbroker_process_resident_memory_bytes"].add_metric(["supervisor", "0"], read[1])
        for pid in set(self._procs) - live:
            del self._procs[pid]  # replaced workers: forget them
        yield from f.values()


# -- the broker ---------------------------------------------------------------

class BrokerCollector(_Described):
    """Connections, long polls, log dirs and the broker's identity."""

    NAMES = ("hostbroker_connections", "hostbroker_fetch_long_polls",
             "hostbroker_log_dir_online", "hostbroker_log_dir_replicas",
             "hostbroker_log_dir_under_replicated", "hostbroker_broker_info")

    def __init__(self, context):
        self.context = context
        plan = context.plan
        if context.config["zookeeper.connect"].strip():
            self.mode = "cluster"
        else:
            self.mode = "logdirs" if plan.logdirs else "standalone"

    def collect(self) -> Iterator[Metric]:
        board = self.context.board
        connections = parked = 0
        for i in range(board.slot_count):
            if board.state(i) == procs.WORKER_EMPTY:
                continue
            connections += board.get(i, procs.CONNECTIONS)
            parked += board.get(i, procs.FETCH_PARKED)
        f = _family("connections")
        f.add_metric([], connections)
        yield f
        f = _family("fetch_long_polls")
        f.add_metric([], parked)
        yield f
        yield from self._log_dirs()
        info = _family("broker_info")
        info.add_metric([str(self.context.config["broker.id"]), __version__, self.mode], 1)
        yield info

    def _log_dirs(self) -> Iterator[Metric]:
        online = _family("log_dir_online")
        replicas = _family("log_dir_replicas")
        under = _family("log_dir_under_replicated")
        flagged = self.context.table.offline_log_dirs()
        dirs = self.context.logdirs
        for index, path in enumerate(self.context.plan.log_dirs):
            s = dirs.slot(index) if dirs is not None and index < dirs.slot_count else None
            if s is None or s.state == FREE:
                state, dir_id, counts = (LD_ONLINE, -1, None)
            else:
                state, dir_id, counts = s.state, s.dir_id, s
            labels = [path, str(dir_id)]
            online.add_metric(labels, 1 if shown_state(state, index in flagged) == LD_ONLINE
                              else 0)
            replicas.add_metric(labels, counts.replicas if counts else 0)
            under.add_metric(labels, counts.under_replicated if counts else 0)
        yield online
        yield replicas
        yield under


# -- groups -------------------------------------------------------------------

class GroupCollector(_Described):
    """Committed offsets, lag and members of the groups the broker stores
    offsets for (:class:`~hostbroker.metrics.lag.GroupLag`, cached), the lag
    (:func:`~hostbroker.metrics.lag.group_lag`) against where consumers stop
    in the partitions ``partitions`` read in this scrape: the high watermark
    of a replicated partition this broker leads, the log end of an
    unreplicated one."""

    NAMES = ("hostbroker_group_committed_offset", "hostbroker_group_lag_bytes",
             "hostbroker_group_members", "hostbroker_metrics_groups_omitted")

    def __init__(self, lag, partitions: PartitionCollector):
        self.lag = lag
        self.partitions = partitions

    def collect(self) -> Iterator[Metric]:
        view = self.partitions.view or PartitionView(self.partitions.context.table)
        reading = self.lag.reading(view.topics)
        ends = view.readable_end()
        keys = sorted(reading.offsets)
        labels = [label_string(("group", "topic", "partition"), k) for k in keys]
        committed = [reading.offsets[k] for k in keys]
        lag = [group_lag(ends.get(k[1:]), c) for k, c in zip(keys, committed)]
        m = spec("group_committed_offset")
        yield ColumnFamily(m.name, m.help, m.type, m.labels, keys, labels, committed)
        m = spec("group_lag_bytes")
        yield ColumnFamily(m.name, m.help, m.type, m.labels, keys, labels, lag)
        members = _family("group_members")
        for group in sorted(reading.members):
            members.add_metric([group], reading.members[group])
        yield members
        omitted = _family("metrics_groups_omitted")
        omitted.add_metric([], reading.omitted)
        yield omitted


def scrape_seconds(started: float) -> Metric:
    """``hostbroker_metrics_scrape_seconds``: wall time since ``started``
    (time.monotonic())."""
    f = _family("metrics_scrape_seconds")
    f.add_metric([], time.monotonic() - started)
    return f
