"""The broker settings of the HTTP listener (``hb-http``: docs/operations.md, "The
HTTP listener"), its metrics and its console, declared here and concatenated
into :data:`hostbroker.config.SETTINGS`, so ``serve --help``, validation and
the table in docs/configuration.md come from them as from every other
setting.

Each row is ``(key, type, default, meaning, bounds)``: ``bounds`` is
``(low, high)`` for an int setting, checked to lie between them, and None
for the others. The two list settings are checked by the function
:data:`HTTP_LIST_CHECKS` names for them: ``http.listeners`` by
:func:`http_listeners_problem`, ``http.allowed.hosts`` by
:func:`allowed_hosts_problem` (read by :func:`allowed_hosts`). Plain rows, as in
:mod:`hostbroker.settings_logdirs`: ``config`` builds its one declaration
from them at import (this module imports nothing of it; a listener URI is
read by :mod:`hostbroker.listeners`, below both).
"""

from __future__ import annotations

import re

from hostbroker.listeners import parse_listener

DEFAULT_LISTENER = "http://127.0.0.1:9644"

HTTP_SETTINGS: tuple[tuple[str, type, object, str, tuple[int, int] | None], ...] = (
    ("http.listeners", str, DEFAULT_LISTENER,
     "HTTP listeners (metrics and console), a comma list of http://HOST:PORT (IPv6 host "
     "in brackets); empty: no HTTP listener (no hb-http process). Bound at start like "
     "listeners: one that cannot be bound refuses the start in one line.", None),
    ("http.max.connections", int, 64,
     "Most HTTP connections open at once; one more is answered 503 and closed at once.",
     (1, 65536)),
    ("http.max.connections.per.client", int, 16,
     "Most HTTP connections open at once from one IP address (an IPv4 peer counts as "
     "one whether it comes as IPv4 or as IPv4-mapped IPv6); one more is answered 503 and "
     "closed at once, and a place is free again when one of its connections closes.",
     (1, 65536)),
    ("http.allowed.hosts", str, "",
     "Host names (comma list, no port) that HTTP requests may name in their Host header "
     "besides IP addresses and localhost; any other Host is answered 421 (a defence "
     "against DNS rebinding). * allows any Host: only for a trusted network, or behind a "
     "proxy that checks Host itself.", None),
    ("http.request.max.bytes", int, 65536,
     "Largest HTTP request (request line, headers and body together). Longer headers are "
     "answered 431, a longer body 413, and the connection is closed.", (1024, 16777216)),
    ("http.request.timeout.ms", int, 10000,
     "An HTTP request must be whole this long after its first byte arrived, else it is "
     "answered 408 and the connection closed (a slow sender holds no connection for "
     "long).", (100, 600000)),
    ("http.idle.timeout.ms", int, 60000,
     "An HTTP connection on which nothing moves this long is closed: idle between "
     "requests, or with an answer its client does not read.", (100, 3600000)),
    ("http.response.max.bytes", int, 67108864,
     "Largest HTTP answer; a larger one is replaced by a 500 naming this limit.",
     (4096, 1073741824)),
    ("http.output.max.bytes", int, 268435456,
     "Most bytes of answers hb-http holds for all its connections at once (answers "
     "written but not yet taken by slow or idle clients; a body shared by several "
     "answers counts once). Past it a new request is answered 503 with Retry-After: 1 "
     "until the answers owed drain.", (65536, 17179869184)),
    ("http.admin.enable", bool, False,
     "Allow changes through the console (its POST requests: create and delete topics, "
     "add partitions, change configs); off, they are answered 403.", None),
    ("http.admin.token.file", str, "",
     "File holding the console's admin token (at least 16 visible ASCII characters; a "
     "trailing newline is ignored); required when http.admin.enable is true. The start "
     "is refused in one line when it is missing, unreadable, a symbolic link, not a "
     "regular file, owned by another user than the broker's (or root), open to group or "
     "others in any way (chmod 600), or too short.", None),
    ("http.metrics.max.partitions", int, 20000,
     "Most partitions whose per-partition series one scrape of /metrics reports; the "
     "rest are left out and counted in hostbroker_metrics_partitions_omitted.",
     (0, 2**31 - 1)),
    ("http.metrics.max.groups", int, 1000,
     "Most consumer groups whose offsets and lag one scrape of /metrics reports; the "
     "rest are left out and counted in hostbroker_metrics_groups_omitted.", (0, 1000000)),
    ("http.metrics.lag.interval.ms", int, 15000,
     "Group offsets are read from the broker at most this often for /metrics (the last "
     "read is reported between).", (0, 3600000)),
    ("http.console.page.max", int, 500,
     "Most rows one console API page returns (topics, partitions, groups).", (1, 100000)),
)


def parse_http_listener(uri: str) -> tuple[str, int]:
    """``(host, port)`` of ``http://HOST:PORT`` (an IPv6 host unbracketed), or
    ValueError saying what is wrong with it. Pure: nothing is looked up or bound."""

    scheme, sep, rest = uri.partition("://")
    if scheme != "http" or not sep or rest.endswith("/"):
        raise ValueError(f"{uri}: expected http://HOST:PORT")
    try:
        _, host, port = parse_listener("tcp://" + rest)
    except ValueError as e:
        raise ValueError(str(e).replace("tcp://" + rest, uri).replace("tcp://", "http://")) \
            from None
    return host, port


def http_listeners_problem(value: str) -> str | None:
    for uri in (part.strip() for part in value.split(",")):
        if uri:
            try:
                parse_http_listener(uri)
            except ValueError as e:
                return str(e)
    return None


_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?"
                        r"(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*\Z")
ANY_HOST = "*"


def normal_host_name(name: str) -> str | None:
    """``name`` as a host name is compared: lower case, one trailing dot dropped;
    None when it is not a DNS name (letters, digits, ``-`` and ``_`` in dot-separated
    labels, at most 253 characters)."""
    name = name.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > 253 or not _HOST_NAME.match(name):
        return None
    if any(len(label) > 63 for label in name.split(".")):
        return None
    return name


def allowed_hosts_problem(value: str) -> str | None:
    for entry in (part.strip() for part in value.split(",")):
        if entry and entry != ANY_HOST and normal_host_name(entry) is None:
            return f"{entry[:80]}: not a host name (a name without a port, or *)"
    return None


def allowed_hosts(value: str) -> frozenset[str]:
    """The names of ``http.allowed.hosts`` (a checked value), normalized as
    :func:`normal_host_name` does; :data:`ANY_HOST` stays as it is."""
    names = set()
    for entry in (part.strip() for part in value.split(",")):
        if entry == ANY_HOST:
            names.add(ANY_HOST)
        elif entry:
            names.add(normal_host_name(entry))
    names.discard(None)
    return frozenset(names)


# the checks of the list settings of HTTP_SETTINGS (config declares them as lists)
HTTP_LIST_CHECKS = {"http.listeners": http_listeners_problem,
                    "http.allowed.hosts": allowed_hosts_problem}


def setting_default(key: str):
    """The default of the setting ``key`` of this module."""
    for row in HTTP_SETTINGS:
        if row[0] == key:
            return row[2]
    raise KeyError(key)
