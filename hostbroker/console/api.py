"""The web console: its pages and its JSON API, mounted by :func:`console_routes`.

Runs in hb-http (``hostbroker/workers/http/``), which calls
``console_routes(router, context)`` once when it builds its Router. What
the console may use is the ``HttpContext`` (built by hb-http, :mod:`hostbroker.workers.http.context`):
the shared tables read-only (process board, partition table, stats tables)
and one client connection to this broker. Everything the console shows
that is not a counter comes from a wire request over that connection
(METADATA, LIST_GROUPS, DESCRIBE_GROUP, OFFSET_FETCH, LIST_OFFSET_GROUPS,
DESCRIBE_TOPIC_CONFIGS), but a cluster's registered brokers, which only
ZooKeeper lists (:mod:`hostbroker.console.cluster`); and every change it
makes is the request the CLI sends (CREATE_TOPIC, DELETE_TOPIC,
ALTER_TOPIC; :mod:`hostbroker.console.changes`): the processors and
handlers answer it as any client's. There is no second path into the
broker.

Routes (one each, added here):

- ``GET /``, ``/static/app.js``, ``/static/style.css``: the page, from a fixed
  table of package files read once; no part of a request names a file.
- ``GET /api/broker``: this broker (id, mode, state, processes, log dirs);
  in cluster mode every broker registered in ZooKeeper (read by
  :mod:`hostbroker.console.cluster`, the answer or its failure kept
  ``BROKERS_TTL_S``) and the controller (METADATA v1).
- ``GET /api/topics?filter=&offset=&limit=``: topics by name, a page at a time
  (``http.console.page.max`` rows at most): partitions, replication factor,
  size (log end - log start: byte offsets), rates, offline partitions.
- ``GET /api/topics/{topic}?offset=&limit=&partition=``: one topic's
  partitions, a page at a time (``partition=N``: the page that starts at
  partition N, its ``offset`` said in the answer): leader, replicas, ISR
  (log dir paths for replicas across log dirs, broker ids in a cluster),
  offsets, size, rates, and its overrides.
- ``GET /api/groups?filter=&offset=&limit=``: groups with members and groups
  with committed offsets only.
- ``GET /api/group?group=&offset=&limit=&sort=&topic=``: one group (its id
  in the query: a group id is any 1 to 255 bytes, ``/``, ``..`` and control
  characters included, which a path segment may not hold): members,
  assignments, and per partition the committed offset, high watermark and
  lag (high watermark - committed, at least 0:
  :func:`hostbroker.metrics.lag.group_lag`, as ``/metrics`` works it out),
  read with METADATA v1; sorted by lag with ``sort=lag``, of one topic with
  ``topic=`` (:mod:`hostbroker.console.group_page`).
- ``GET /api/rates``: the broker-wide series of the live charts.
- ``POST`` changes (:mod:`hostbroker.console.changes`), each ``admin=True``:
  the Router's gate (``http.admin.enable``, the token, the cross-site
  checks) answers before any of them runs.

hb-http's server puts ``Content-Security-Policy: default-src 'self'`` on every
answer: the page loads nothing from elsewhere and runs no inline script, so
it holds no inline script or style to allow. A broker that does
not answer is a 502 naming it; hb-http's connection is dropped and opened
again by the next request.

Cost: a topics page reads METADATA for every topic (kept ``METADATA_TTL_S``,
so paging and the charts' polls do not ask again) and the stats tables once;
at 10,000 partitions that is tens of milliseconds of hb-http, none of the
handlers' beyond answering one METADATA. A group's page asks the group's
own topics only (LIST_OFFSET_GROUPS of it, then OFFSET_FETCH and METADATA
v1 of those topics), within a deadline of a few seconds for the whole page
(:mod:`hostbroker.console.group_page`).
"""

from __future__ import annotations

import bisect
import importlib.resources
import time

from hostbroker.console.rates import BrokerRates, PartitionRates
from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.shm import procs
from hostbroker.console import changes
from hostbroker.console.answers import (FILTER_MAX, answer, broker_refused, error_name, page_of,
                                        topic_name, whole_parameter)
from hostbroker.console.group_page import group_page
from hostbroker.web.router import HttpError, Response

# the page's files: path -> (package file, content type); nothing else is served
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
METADATA_TTL_S = 2.0  # one METADATA of every topic serves the pages asked within this
BROKERS_TTL_S = 10.0  # cluster mode: ZooKeeper's brokers (or why they were not read) kept this long
PARTITION_RATES_MAX_AGE_S = 30.0  # the charts' poll keeps a read this fresh to rate against
CLIENT_ID = "hb-http-console"


def console_routes(router, context) -> None:
    """Add the console's pages and API to ``router`` (module doc)."""
    console = Console(context)
    for path, (name, content_type) in STATIC.items():
        router.add("GET", path, console.static_route(name, content_type))
    router.add("GET", "/api/broker", console.broker)
    router.add("GET", "/api/topics", console.topics)
    router.add("GET", "/api/topics/{topic}", console.topic)
    router.add("GET", "/api/groups", console.groups)
    router.add("GET", "/api/group", console.group)
    router.add("GET", "/api/rates", console.rates)
    changes.add_routes(router, console)


class Console:
    """The console's state in hb-http: the context, the cached METADATA and the rates."""

    def __init__(self, context, clock=time.monotonic):
        self.context = context
        self.config = context.config
        self.page_max = self.config["http.console.page.max"]
        self.cluster = bool(self.config["zookeeper.connect"])
        self._clock = clock
        self._metadata = None
        self._metadata_at = float("-inf")
        self._coordinator = None
        self._brokers = None  # (read at, (registered brokers, problem)): cluster mode
        self.broker_rates = BrokerRates(lambda: context.board, clock)
        self.partition_rates = PartitionRates(context, clock)

    # -- the broker connection ------------------------------------------------------

    def ask(self, what: str, work):
        """``work(client)`` over hb-http's broker connection; a broker that cannot be
        reached is a 502 (the connection is dropped and opened again next time)."""
        from hostbroker.client.errors import BrokerError

        try:
            return work(self.context.broker_client())
        except BrokerError as exc:
            if exc.topic is None:  # an error frame: the broker closed the connection
                self.context.drop_client()
            raise broker_refused(exc.code, None, what) from None
        except (HostbrokerError, OSError) as exc:
            self.context.drop_client()
            raise HttpError(502, f"{what}: the broker did not answer ({exc})") from None

    def coordinator(self):
        """A group client to this broker (JOIN/SYNC/... answers need their own decoder)."""
        if self._coordinator is None:
            from hostbroker.client.coordinator_requests import CoordinatorClient
            self._coordinator = CoordinatorClient([self.context.broker_uri],
                                                  timeout=self.context.broker_timeout_s,
                                                  client_id=CLIENT_ID)
        return self._coordinator

    def ask_groups(self, what: str, work):
        from hostbroker.client.errors import BrokerError

        try:
            return work(self.coordinator())
        except BrokerError as exc:
            if exc.code == ErrorCode.UNSUPPORTED_VERSION:
                self._drop_coordinator()
                raise HttpError(501, f"{what}: this broker does not serve consumer groups") \
                    from None
            raise broker_refused(exc.code, None, what) from None
        except (HostbrokerError, OSError) as exc:
            self._drop_coordinator()
            raise HttpError(502, f"{what}: the broker did not answer ({exc})") from None

    def _drop_coordinator(self) -> None:
        client, self._coordinator = self._coordinator, None
        if client is not None:
            client.close()

    def metadata(self, fresh: bool = False):
        """METADATA (version 0) of every topic, at most ``METADATA_TTL_S`` old."""
        now = self._clock()
        if fresh or self._metadata is None or now - self._metadata_at >= METADATA_TTL_S:
            self._metadata = self.ask("reading the topics", lambda c: c.metadata())
            self._metadata_at = now
        return self._metadata

    def forget_metadata(self) -> None:
        """After a change: the next page reads the topics again."""
        self._metadata = None

    # -- the page -----------------------------------------------------------------------

    def static_route(self, name: str, content_type: str):
        body = importlib.resources.files("hostbroker.console").joinpath("static", name) \
            .read_bytes()

        def serve(request) -> Response:
            return Response(200, content_type, body)

        return serve

    # -- GET /api/broker -----------------------------------------------------------------

    def broker(self, request) -> Response:
        import hostbroker
        kinds = procs.KIND_NAMES
        board = self.context.board
        processes = []
        for row in board.snapshot():
            if row.get("torn"):
                continue
            processes.append({"kind": kinds.get(row["kind"], str(row["kind"])),
                              "index": row["index"], "pid": row["pid"],
                              "state": row["state"].name.lower(),
                              "restarts": max(0, row["epoch"] - 1)})
        metadata = self.metadata()
        me = metadata.broker_id
        brokers = [{"broker_id": b.broker_id, "host": b.host, "port": b.port,
                    "unix_path": b.unix_path, "state": "live", "self": True}
                   for b in metadata.brokers if b.broker_id == me]
        controller, problem = -1, None
        if self.cluster:  # every broker registered in ZooKeeper
            registered, problem = self._registered()
            if registered or problem is None:
                if me not in {b.broker_id for b in registered}:
                    for b in brokers:
                        b["state"] = "not registered"
                else:
                    brokers = []
                brokers += [{"broker_id": b.broker_id, "host": b.host, "port": b.port,
                             "unix_path": b.unix, "state": "live", "self": b.broker_id == me}
                            for b in registered]
                brokers.sort(key=lambda b: b["broker_id"])
            controller = self._controller(metadata)
        document = {
            "broker_id": me, "version": hostbroker.__version__,
            "mode": "cluster" if self.cluster else "standalone",
            "state": board.broker_state.name.lower(),
            "admin": bool(self.config["http.admin.enable"]),
            "page_max": self.page_max,
            "topics": len(metadata.topics),
            "partitions": sum(len(t.partitions) for t in metadata.topics),
            "controller_id": controller, "brokers": brokers, "zookeeper_problem": problem,
            "processes": processes,
            "log_dirs": self._log_dirs(),
        }
        return answer(document)

    def _registered(self) -> tuple[list, str | None]:
        """ZooKeeper's registered brokers, or the problem reading them, read at
        most once per ``BROKERS_TTL_S``: each read is a ZooKeeper session opened
        and closed (and, ZooKeeper away, up to its connect timeout of hb-http's
        loop), so however often the page is asked for, ZooKeeper sees one."""
        from hostbroker.console.cluster import live_brokers

        now = self._clock()
        if self._brokers is None or now - self._brokers[0] >= BROKERS_TTL_S:
            self._brokers = (now, live_brokers(self.config["zookeeper.connect"]))
        return self._brokers[1]

    def _log_dirs(self) -> list[dict]:
        """Each configured log dir (id, path, state) from the log dir table, a dir
        its writer flagged offline shown offline; ``unknown`` where the table is
        not there or the dir's slot is mid-write."""
        from hostbroker.shm.logdirs import LD_STATE_NAMES, shown_state

        dirs = self.context.logdirs
        records = dict(dirs.scan()) if dirs is not None else {}
        flagged = self.context.table.offline_log_dirs()
        out = []
        for index, path in enumerate(self.config.log_dirs):
            record = records.get(index)
            if record is None:
                out.append({"dir_id": None, "path": path, "state": "unknown"})
                continue
            state = shown_state(record.state, index in flagged)
            out.append({"dir_id": record.dir_id if record.dir_id >= 0 else None,
                        "path": path, "state": LD_STATE_NAMES.get(state, str(state))})
        return out

    def _controller(self, metadata) -> int:
        """The controller's id (METADATA version 1, asked about one topic only); -1
        where there is none or the broker does not say."""
        from hostbroker.client.errors import BrokerError

        one = [t.topic for t in metadata.topics[:1]]
        try:
            return self.context.broker_client().metadata_v1(one).controller_id
        except (BrokerError, HostbrokerError, OSError):
            self.context.drop_client()
            return -1

    # -- GET /api/topics -----------------------------------------------------------------

    def _replication(self) -> dict[str, int]:
        """topic -> its replication factor, from the partition table (1 for plain ones)."""
        from hostbroker.shm.table import TornSlotError

        factors: dict[str, int] = {}
        try:
            slots = self.context.table.scan()
        except TornSlotError:  # a slot left mid-write: the factors of this read are 1
            return factors
        for _, slot in slots:
            n = len(slot.replicas) or 1
            if n > factors.get(slot.name, 0):
                factors[slot.name] = n
        return factors

    def _rates_of(self, topic: str, partitions) -> tuple:
        """Summed (messages, bytes in, bytes out) per second of ``partitions``; Nones
        while the rates are not known yet."""
        total = [0.0, 0.0, 0.0]
        seen = False
        for p in partitions:
            rates = self.partition_rates.of(topic, p)
            if rates is None:
                continue
            seen = True
            for i, value in enumerate(rates):
                total[i] += value
        return tuple(round(v, 3) for v in total) if seen else (None, None, None)

    def topics(self, request) -> Response:
        offset, limit, text = page_of(request, self.page_max)
        metadata = self.metadata()
        needle = text.lower()
        found = sorted((t for t in metadata.topics if needle in t.topic.lower()),
                       key=lambda t: t.topic)
        shown = found[offset:offset + limit]
        self.partition_rates.refresh()
        factors = self._replication() if shown else {}
        rows = []
        for t in shown:
            messages, bytes_in, bytes_out = self._rates_of(
                t.topic, [p.partition for p in t.partitions])
            rows.append({
                "topic": t.topic, "partitions": len(t.partitions),
                "replication": factors.get(t.topic, 1),
                "size_bytes": sum(max(0, p.log_end_offset - p.log_start_offset)
                                  for p in t.partitions),
                "messages_in_per_s": messages, "bytes_in_per_s": bytes_in,
                "bytes_out_per_s": bytes_out,
                "offline": sum(p.error_code != ErrorCode.NONE for p in t.partitions),
                "error": error_name(t.error_code)})
        return answer({"total": len(found), "offset": offset, "limit": limit,
                       "filter": text, "topics": rows})

    # -- GET /api/topics/{topic} ---------------------------------------------------------

    def _replicas(self, topic: str) -> dict[int, dict]:
        """partition -> leader, replicas, ISR and high watermark: log dir paths for
        replicas across log dirs (METADATA version 2), broker ids in a cluster
        (version 1); {} where the broker answers neither (plain partitions)."""
        from hostbroker.client.errors import BrokerError

        client = self.context.broker_client()
        try:
            if self.cluster:
                response, names = client.metadata_v1([topic]), None
            else:
                response = client.metadata_v2([topic])
                names = {d.dir_id: d.path for d in response.log_dirs}
        except (BrokerError, HostbrokerError, OSError):
            self.context.drop_client()
            return {}
        out = {}
        for t in response.topics:
            for p in t.partitions:
                if names is not None:
                    if not p.replica_dirs:
                        continue
                    name = lambda i: names.get(i, f"dir {i}")  # noqa: E731
                    out[p.partition] = {
                        "leader": name(p.leader_dir) if p.leader_dir >= 0 else None,
                        "replicas": [name(i) for i in p.replica_dirs],
                        "isr": [name(i) for i in p.isr_dirs],
                        "high_watermark": p.high_watermark}
                elif p.replicas:
                    out[p.partition] = {"leader": p.leader if p.leader >= 0 else None,
                                        "replicas": list(p.replicas), "isr": list(p.isr),
                                        "high_watermark": p.high_watermark}
        return out

    def _overrides(self, topic: str) -> dict[str, str] | None:

        return changes.topic_overrides(self, topic)

    def topic(self, request) -> Response:
        name = topic_name(request.params["topic"])
        offset, limit, _ = page_of(request, self.page_max)
        start = whole_parameter(request, "partition", None)
        response = self.ask(f"reading topic {name[:FILTER_MAX]}",
                            lambda c: c.metadata([name]))
        found = [t for t in response.topics if t.topic == name]
        if not found or found[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise HttpError(404, f"no topic {name[:FILTER_MAX]}")
        t = found[0]
        partitions = sorted(t.partitions, key=lambda p: p.partition)
        if start is not None:  # the page that starts at that partition (or past the last)
            offset = bisect.bisect_left([p.partition for p in partitions], start)
        shown = partitions[offset:offset + limit]
        replicas = self._replicas(name) if shown else {}
        self.partition_rates.refresh()
        rows = []
        for p in shown:
            rates = self.partition_rates.of(name, p.partition) or (None, None, None)
            plain = {"leader": p.broker_id, "replicas": [p.broker_id], "isr": [p.broker_id],
                     "high_watermark": p.log_end_offset}
            if p.log_dir and not self.cluster:
                plain.update(leader=p.log_dir, replicas=[p.log_dir], isr=[p.log_dir])
            rows.append({"partition": p.partition, **replicas.get(p.partition, plain),
                         "log_start_offset": p.log_start_offset,
                         "log_end_offset": p.log_end_offset,
                         "size_bytes": max(0, p.log_end_offset - p.log_start_offset),
                         "log_dir": p.log_dir, "error": error_name(p.error_code),
                         "messages_in_per_s": rates[0], "bytes_in_per_s": rates[1],
                         "bytes_out_per_s": rates[2]})
        factor = max((len(r["replicas"]) for r in replicas.values()), default=1)
        messages, bytes_in, bytes_out = self._rates_of(name, [p.partition for p in partitions])
        return answer({
            "topic": name, "total": len(partitions), "offset": offset, "limit": limit,
            "replication": factor, "config": self._overrides(name),
            "size_bytes": sum(max(0, p.log_end_offset - p.log_start_offset)
                              for p in partitions),
            "messages_in_per_s": messages, "bytes_in_per_s": bytes_in,
            "bytes_out_per_s": bytes_out, "partitions": rows})

    # -- GET /api/groups -------------------------------------------------------------------

    def _offset_groups(self) -> set[str]:
        """Groups with committed offsets (LIST_OFFSET_GROUPS); empty where the broker
        does not answer it."""
        from hostbroker.client.errors import BrokerError

        try:
            response = self.context.broker_client().list_offset_groups()
        except (BrokerError, HostbrokerError, OSError):
            self.context.drop_client()
            return set()
        if response.error_code != ErrorCode.NONE:
            return set()
        return {g.group for g in response.groups}

    def groups(self, request) -> Response:
        offset, limit, text = page_of(request, self.page_max)
        try:
            live = set(self.ask_groups("listing groups", lambda c: c.list_groups()))
        except HttpError as exc:
            if exc.status != 501:
                raise
            live = set()  # a broker without groups' coordinator: its stored offsets only
        everyone = live | self._offset_groups()
        needle = text.lower()
        found = sorted(g for g in everyone if needle in g.lower())
        rows = [{"group": g, "members": g in live} for g in found[offset:offset + limit]]
        return answer({"total": len(found), "offset": offset, "limit": limit,
                       "filter": text, "groups": rows})

    # -- GET /api/group?group= ----------------------------------------------------------

    def group(self, request) -> Response:
        return group_page(self, request)

    # -- GET /api/rates ------------------------------------------------------------------------

    def rates(self, request) -> Response:
        self.broker_rates.sample()
        # keeps a partition read to rate against when the topics page is asked for
        self.partition_rates.refresh(older_than=PARTITION_RATES_MAX_AGE_S)
        return answer(self.broker_rates.document())
