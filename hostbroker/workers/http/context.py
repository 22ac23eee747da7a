"""What an HTTP handler may use: :class:`HttpContext`, built once in ``hb-http``.

Owns: hb-http's read-only attachments to the broker's shared memory (the
process board, the partition table, the log dir table, and the per-process
stats tables of :mod:`hostbroker.shm.stats`), and its one connection to this
broker (:meth:`HttpContext.broker_client`). Handlers read the tables for
what the broker already counts and send a request for anything else
(metadata, groups, offsets, topic changes): that request goes the normal
route, through the acceptor, a processor and a handler, like any client's.
There is no second path into the broker and nothing here writes shared
memory.

Attaching is lazy and forgiving: a table that is not there (the stats of a
broker built without them, a region whose process has not made it yet) is
left out and looked for again at the next call, so a page shows what there
is rather than failing.

Runs in hb-http only, single-threaded: the broker connection is blocking,
bounded by ``BROKER_TIMEOUT_S``, and shared by every request of the process.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable

from hostbroker.config import Config, parse_listener
from hostbroker.shm.logdirs import LogDirTable
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.procs import ProcessBoard
from hostbroker.workers.plan import BrokerPlan

# A request hb-http sends its own broker is answered in milliseconds; a broker
# that does not answer within this fails the page (502), not the listener.
BROKER_TIMEOUT_S = 5.0
CLIENT_ID = "hb-http"


def broker_uri(config: Config) -> str:
    """The listener hb-http talks to: the first ``unix://``, else the first
    ``tcp://``, else the first ``ssl://`` (a wildcard host reached on loopback),
    where it shows the broker's own certificate (:meth:`HttpContext.broker_client`)."""
    listeners = config.listeners
    for uri in listeners:
        if uri.startswith("unix://"):
            return uri
    tcp = [uri for uri in listeners if uri.startswith("tcp://")]
    parsed = parse_listener((tcp or listeners)[0])  # (an ssl:// one only when no other)
    host = parsed[1]
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    scheme = parsed[0]
    return f"{scheme}://[{host}]:{parsed[2]}" if ":" in host else f"{scheme}://{host}:{parsed[2]}"


def admin_host(peer: str) -> str:
    """The host an HTTP client's ``host:port`` address is to the ACLs, as the
    Kafka listeners tell it (workers/peers.py): the port and brackets gone,
    an IPv4-mapped IPv6 address (an IPv4 client of a dual-stack ``[::]``
    listener) as its IPv4 form, an address in its canonical text."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    host = host.strip("[]")
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


class HttpContext:
    """The plan and configuration, the shared tables (read-only), and the broker client."""

    def __init__(self, plan: BrokerPlan):
        self.plan = plan
        self.config: Config = plan.config
        # whether an answer still owed to some connection holds this object (set
        # by the worker): close scrapes share a body only while one is in flight
        self.answer_held: Callable[[object], bool] = lambda obj: False
        self._board: ProcessBoard | None = None
        self._table: PartitionTable | None = None
        self._logdirs: LogDirTable | None = None
        self._client = None
        self._partition_stats: dict[tuple[str, int], object] = {}
        self._api_stats: dict[tuple[str, int], object] = {}
        self.broker_uri = broker_uri(self.config)  # the listener broker_client() reaches
        # over ssl://: the broker's own client context (its certificate shown, its
        # host not checked: this broker's own listener, on loopback); None over
        # unix:// and tcp://
        self.broker_tls = None
        if self.broker_uri.startswith("ssl://"):
            from hostbroker.workers.tls import inter_broker_context

            self.broker_tls = inter_broker_context(self.config, check_host=False)
        self.broker_timeout_s = BROKER_TIMEOUT_S
        self._access = None  # the ACLs' view, opened on the first change (admin_may)

    # -- shared memory (read-only) -------------------------------------------------
    @property
    def board(self) -> ProcessBoard:
        if self._board is None:
            self._board = ProcessBoard.attach(self.plan.board_name, readonly=True)
        return self._board

    @property
    def table(self) -> PartitionTable:
        """The partition table (slot = the index of the stats tables' rows)."""
        if self._table is None:
            self._table = PartitionTable.attach(self.plan.table_name, readonly=True)
        return self._table

    @property
    def logdirs(self) -> LogDirTable | None:
        """The log dir table, or None when it cannot be attached."""
        if self._logdirs is None:
            try:
                self._logdirs = LogDirTable.attach(self.plan.logdirs_name, readonly=True)
            except (OSError, ValueError):
                return None
        return self._logdirs

    def partition_stats(self) -> list[tuple[tuple[str, int], object]]:
        """``((kind, index), PartitionStats)`` of every process that keeps them."""
        return self._stats("PartitionStats", "stats_name", "stats_workers",
                           self._partition_stats)

    def api_stats(self) -> list[tuple[tuple[str, int], object]]:
        """``((kind, index), ApiStats)`` of every process that keeps them."""
        return self._stats("ApiStats", "api_stats_name", "api_stats_workers", self._api_stats)

    def _stats(self, cls_name: str, name_of: str, workers_of: str, cache: dict) -> list:
        from hostbroker.shm import stats

        cls = getattr(stats, cls_name)
        naming = getattr(self.plan, name_of)
        for key in getattr(self.plan, workers_of)():
            if key not in cache:
                try:
                    cache[key] = cls.attach(naming(*key), readonly=True)
                except (OSError, ValueError):  # not made (yet) by that process's kind
                    continue
        return sorted(cache.items())

    # -- the broker ---------------------------------------------------------------
    def broker_client(self):
        """A :class:`hostbroker.client.simple.SimpleClient` to this broker
        (:func:`broker_uri`), connected on first use. After a failed request
        call :meth:`drop_client`: the next call opens a fresh connection."""
        if self._client is None:
            from hostbroker.client.simple import SimpleClient
            self._client = SimpleClient(self.broker_uri, CLIENT_ID,
                                        timeout=BROKER_TIMEOUT_S, tls=self.broker_tls)
        return self._client

    # -- access control (docs/security.md) -------------------------------------------
    def admin_may(self, operation, resource_type, name: str, peer: str) -> bool:
        """May a console change made with the admin token do ``operation`` on the
        resource: as ``http.admin.principal`` from the HTTP client's address
        (``peer``, ``host:port``), with the broker's ACLs (always, with the
        authorizer off). hb-http sends the change as the broker's own user,
        whom the broker allows everything: this is the check that counts."""
        if not self.config["authorizer.enable"]:
            return True
        if self._access is None:
            from hostbroker.workers.access import open_access
            self._access = open_access(self.plan, self.config)
        from hostbroker.security.principals import Identity, Principal

        host = admin_host(peer)
        identity = Identity(Principal.parse(self.config["http.admin.principal"]), (), host)
        # (the authorizer itself: never the broker's own user's pass over its socket)
        return self._access.authorizer().authorize(identity, operation, resource_type, name)

    def acting_as(self) -> str | None:
        """The line hb-http says at start about whom the broker sees it as,
        when that is not the broker's own user (its Unix socket): over TCP
        ``User:ANONYMOUS``, over TLS the CN of the broker's certificate."""
        uri = self.broker_uri
        if uri.startswith("unix://"):
            return None
        if uri.startswith("tcp://"):
            return f"hb-http reaches the broker at {uri} as User:ANONYMOUS"
        from hostbroker.workers.tls import ANONYMOUS, TlsConfigError, own_principal

        try:
            who = own_principal(self.config)
        except TlsConfigError as e:
            return f"hb-http reaches the broker at {uri}, which will refuse it: {e}"
        if who == ANONYMOUS:
            return (f"hb-http reaches the broker at {uri} as User:ANONYMOUS (ssl.client.auth "
                    f"none: its certificate is not asked for)")
        return (f"hb-http reaches the broker at {uri} as {who} (the broker's certificate, "
                f"ssl.keystore.location)")

    def drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except OSError as e:
                print(f"hostbroker: hb-http: closing the broker connection: {e}",
                      file=sys.stderr, flush=True)

    def close(self) -> None:
        self.drop_client()
