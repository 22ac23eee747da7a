"""The ZooKeeper layout of docs/spec/zookeeper.md, and the values stored at each path.

Pure: strings in, strings and values out. Every value is UTF-8 text::

    /brokers/ids/[broker_id]                 {"version":1,"host":h,"port":p,"unix":path,
                                              "endpoints":["PLAINTEXT://h:p","SSL://h:p"]}
    /brokers/topics/[topic]/[broker_id]      number of partitions (decimal)
    /consumers/[group]/ids/[consumer_id]     {"topic": number_of_streams, ...}
    /consumers/[group]/offsets/[topic]/[broker_id-partition]   offset (decimal)
    /consumers/[group]/owners/[topic]/[broker_id-partition]    consumer_id-stream_index

A partition of a replicated topic (its ``/brokers/topics/[topic]`` holds an
assignment, :mod:`hostbroker.cluster.replica_nodes`) has a number global to
the topic and no broker of its own: it is named by its number alone
(``/consumers/[group]/offsets/[topic]/[partition]``, Kafka 0.8's layout),
and its pair carries the broker id :data:`REPLICATED`.

A decoder raises :class:`ValueError` with one line naming the path for a
value that does not follow the layout or passes a bound of
:class:`~hostbroker.cluster.zkread.Bounds` (another program may have written
it): sizes, JSON depth and numbers are checked before anything is built.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

from hostbroker.cluster.zkread import (
    DEFAULT,
    MAX_BROKER_ID,
    MAX_BROKER_NODE_BYTES,
    MAX_INT64,
    MAX_NAME_BYTES,
    MAX_UNIX_PATH_BYTES,
    Bounds,
    decimal,
    json_object,
    name_ok,
)

BROKER_IDS = "/brokers/ids"
# The most entries a registration's ``endpoints`` list may hold, and the
# protocols it may name (Kafka's; the SASL ones are read and left aside).
MAX_ENDPOINTS = 4
_ENDPOINT_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"

# The broker id of a replicated topic's partitions in a (broker_id, partition) pair:
# led by whichever replica leads it now, not kept by one broker.
REPLICATED = -1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def topic_broker_path(topic: str, broker_id: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/{broker_id}"


def group_path(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def group_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_path(group: str, consumer_id: str) -> str:
    return f"{CONSUMERS}/{group}/ids/{consumer_id}"


def offsets_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}"


def offset_path(group: str, topic: str, broker_id: int, partition: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition_name(broker_id, partition)}"


def owners_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}"


def owner_path(group: str, topic: str, broker_id: int, partition: int) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}/{partition_name(broker_id, partition)}"


def partition_name(broker_id: int, partition: int) -> str:
    """``broker_id-partition``, the name of a partition of the cluster; the bare
    ``partition`` for a replicated topic's (``broker_id`` REPLICATED)."""
    if broker_id == REPLICATED:
        return str(partition)
    return f"{broker_id}-{partition}"


def parse_partition_name(name: str) -> tuple[int, int]:
    """(broker_id, partition) of a ``broker_id-partition`` node name, or (REPLICATED,
    partition) of a bare ``partition`` (a replicated topic's)."""
    if name.isascii() and name.isdigit() and len(name) <= 10:
        return REPLICATED, int(name)
    broker, sep, partition = name.partition("-")
    if (not sep or not broker.isascii() or not broker.isdigit() or len(broker) > 10
            or not partition.isascii() or not partition.isdigit() or len(partition) > 10):
        raise ValueError(f"{name[:80]!r} is not a broker_id-partition name")
    return int(broker), int(partition)


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as ``/brokers/ids/[id]`` describes it: its TCP host/port,
    Unix path and TLS (``ssl://``) host/port, each pair None where it has none."""

    broker_id: int
    host: str | None
    port: int | None
    unix: str | None
    ssl_host: str | None = None
    ssl_port: int | None = None

    def uris(self) -> list[str]:
        """Its listeners as client URIs, Unix first (the cheaper one on the same
        host), TLS last (a client that can speak plain Kafka need not pay for it)."""
        out = []
        if self.unix:
            out.append(f"unix://{self.unix}")
        if self.host and self.port:
            out.append(f"tcp://{_bracketed(self.host)}:{self.port}")
        if self.ssl_host and self.ssl_port:
            out.append(f"ssl://{_bracketed(self.ssl_host)}:{self.ssl_port}")
        return out

    def endpoints(self) -> list[str]:
        """Kafka's ``endpoints`` list of the registration: ``PLAINTEXT://h:p``,
        ``SSL://h:p`` (``[h]`` for an IPv6 address)."""
        out = []
        if self.host and self.port:
            out.append(f"PLAINTEXT://{_bracketed(self.host)}:{self.port}")
        if self.ssl_host and self.ssl_port:
            out.append(f"SSL://{_bracketed(self.ssl_host)}:{self.ssl_port}")
        return out


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def encode_broker(info: BrokerInfo) -> bytes:
    value = {"version": 1, "host": info.host, "port": info.port, "unix": info.unix}
    endpoints = info.endpoints()
    if endpoints:
        value["endpoints"] = endpoints
    return json.dumps(value, separators=(",", ":")).encode()


def _host_problem(host) -> bool:
    return (not isinstance(host, str) or not 0 < len(host) <= MAX_NAME_BYTES
            or not host.isprintable() or "/" in host or " " in host)


def _port_problem(port) -> bool:
    return type(port) is not int or not 0 < port < 65536


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")


def _endpoint_host_problem(host: str, bracketed: bool) -> str | None:
    """Why ``host`` of an ``endpoints`` entry is not an IP literal or an LDH
    name (an IPv6 address in brackets only), None when it is one."""
    if bracketed:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return "in brackets but not an IPv6 address"
        return None
    if ":" in host:
        return "an IPv6 address goes in brackets"
    try:
        ipaddress.IPv4Address(host)
        return None
    except ValueError:
        pass
    if not 0 < len(host) <= 253 or not all(_LABEL.match(label) for label in host.split(".")):
        return "not an IP address or a host name of letters, digits and hyphens"
    return None


def _endpoint(where: str, text) -> tuple[str, str, int]:
    """``(protocol, host, port)`` of one ``PROTOCOL://host:port`` entry: host an
    IPv4 address, an IPv6 one in brackets, or an LDH name; port 1-65535
    without leading zeros."""
    if not isinstance(text, str) or len(text) > MAX_NAME_BYTES + 32:
        raise ValueError(f"{where}: endpoint {str(text)[:80]!r} is not PROTOCOL://host:port")
    protocol, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if (not sep or protocol not in _ENDPOINT_PROTOCOLS or not colon
            or not port.isascii() or not port.isdigit() or len(port) > 5):
        raise ValueError(f"{where}: endpoint {text[:80]!r} is not PROTOCOL://host:port "
                         f"with PROTOCOL one of {', '.join(_ENDPOINT_PROTOCOLS)}")
    problem = "" if _host_problem(host) else _endpoint_host_problem(host, bracketed)
    if problem is not None:
        raise ValueError(f"{where}: endpoint {text[:80]!r}: {host[:80]!r} is not a host name"
                         f"{': ' + problem if problem else ''}")
    if _port_problem(int(port)) or port.startswith("0"):
        raise ValueError(f"{where}: endpoint {text[:80]!r}: {port} is not a port number")
    return protocol, host, int(port)


def decode_broker(broker_id: int, data: bytes, path: str = "",
                  bounds: Bounds = DEFAULT) -> BrokerInfo:
    where = path or broker_path(broker_id)
    if not 0 <= broker_id <= MAX_BROKER_ID:
        raise ValueError(f"{where}: {broker_id} is not a broker id")
    if len(data) > MAX_BROKER_NODE_BYTES:
        raise ValueError(f"{where}: value of {len(data)} bytes is longer than a broker "
                         f"registration may be ({MAX_BROKER_NODE_BYTES})")
    value = json_object(data, where, bounds, "a broker registration")
    if value.get("version") != 1:
        raise ValueError(f"{where}: not a version 1 broker registration")
    host, port, unix = value.get("host"), value.get("port"), value.get("unix")
    if host is not None and _host_problem(host):
        raise ValueError(f"{where}: host {str(host)[:80]!r} is not a host name")
    if port is not None and _port_problem(port):
        raise ValueError(f"{where}: port {str(port)[:40]!r} is not a port number")
    if unix is not None and (not isinstance(unix, str) or not unix
                             or len(unix.encode(errors="replace")) > MAX_UNIX_PATH_BYTES
                             or "\0" in unix):
        raise ValueError(f"{where}: unix {str(unix)[:80]!r} is not a socket path")
    ssl_host = ssl_port = None
    endpoints = value.get("endpoints")
    if endpoints is not None:
        if not isinstance(endpoints, list) or len(endpoints) > MAX_ENDPOINTS:
            raise ValueError(f"{where}: endpoints is not a list of at most {MAX_ENDPOINTS} "
                             "PROTOCOL://host:port entries")
        seen: set = set()
        for text in endpoints:
            protocol, e_host, e_port = _endpoint(where, text)
            if protocol in seen:
                raise ValueError(f"{where}: endpoints names {protocol} twice")
            seen.add(protocol)
            if protocol == "SSL":
                ssl_host, ssl_port = e_host, e_port
            elif protocol == "PLAINTEXT" and host is None and port is None:
                host, port = e_host, e_port  # (a node that names it only there)
    if not ((host and port) or unix or ssl_host):
        raise ValueError(f"{where}: names no listener")
    return BrokerInfo(broker_id, host, port, unix, ssl_host, ssl_port)


def encode_count(count: int) -> bytes:
    return str(int(count)).encode()


def decode_count(data: bytes, path: str, bounds: Bounds = DEFAULT) -> int:
    """A topic's partition count on one broker: 0 to the registration bound."""
    return decimal(data, path, bounds, bounds.partitions_per_registration,
                   "zookeeper.max.partitions.per.registration")


def decode_offset(data: bytes, path: str, bounds: Bounds = DEFAULT) -> int:
    """A committed offset: 0 to 2**63 - 1."""
    return decimal(data, path, bounds, MAX_INT64, "the largest offset")


def encode_subscription(streams: dict[str, int]) -> bytes:
    return json.dumps(dict(sorted(streams.items())), separators=(",", ":")).encode()


def decode_subscription(data: bytes, path: str, bounds: Bounds = DEFAULT) -> dict[str, int]:
    value = json_object(data, path, bounds, "a {topic: number_of_streams} subscription")
    if any(not isinstance(k, str) or not name_ok(k) or type(v) is not int or v < 1
           for k, v in value.items()):
        raise ValueError(f"{path}: not a {{topic: number_of_streams}} subscription")
    if len(value) > bounds.children:
        raise ValueError(f"{path}: {len(value)} topics are over zookeeper.max.children "
                         f"({bounds.children})")
    over = [k for k, v in value.items() if v > bounds.streams]
    if over:
        raise ValueError(f"{path}: {value[over[0]]} streams of {over[0][:80]} are over "
                         f"zookeeper.max.streams ({bounds.streams})")
    return value


def encode_owner(consumer_id: str, stream: int) -> bytes:
    return f"{consumer_id}-{stream}".encode()


def decode_owner(data: bytes, path: str, bounds: Bounds = DEFAULT) -> tuple[str, int]:
    """(consumer_id, stream index) of an owner node."""
    if len(data) > min(bounds.node_bytes, 2 * MAX_NAME_BYTES):
        raise ValueError(f"{path}: value of {len(data)} bytes is not consumer_id-stream_index")
    text = data.decode(errors="replace")
    consumer, sep, stream = text.rpartition("-")
    if (not sep or not consumer or not stream.isascii() or not stream.isdigit()
            or len(stream) > 9):
        raise ValueError(f"{path}: {text[:80]!r} is not consumer_id-stream_index")
    return consumer, int(stream)
