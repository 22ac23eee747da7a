"""The broker settings of the HTTP listener (``hb-http``: docs/operations.md, "The
HTTP listener"), its metrics and its console, declared here and concatenated
into :data:`hostbroker.config.SETTINGS`, so ``serve --help``, validation and
the table in docs/configuration.md come from them as from every other
setting.

Each row is ``(key, type, default, meaning, bounds)``: ``bounds`` is
``(low, high)`` for an int setting, checked to lie between them, and None
for the others. ``http.listeners`` is checked by
:func:`http_listeners_problem`. Plain rows, as in
:mod:`hostbroker.settings_logdirs`: ``config`` builds its one declaration
from them at import (this module imports nothing of it at import time).
"""

from __future__ import annotations

DEFAULT_LISTENER = "http://127.0.0.1:9644"

HTTP_SETTINGS: tuple[tuple[str, type, object, str, tuple[int, int] | None], ...] = (
    ("http.listeners", str, DEFAULT_LISTENER,
     "HTTP listeners (metrics and console), a comma list of http://HOST:PORT (IPv6 host "
     "in brackets); empty: no HTTP listener (no hb-http process). Bound at start like "
     "listeners: one that cannot be bound refuses the start in one line.", None),
    ("http.max.connections", int, 64,
     "Most HTTP connections open at once; one more is answered 503 and closed at once.",
     (1, 65536)),
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
    ("http.admin.enable", bool, False,
     "Allow changes through the console (its POST requests: create and delete topics, "
     "add partitions, change configs); off, they are answered 403.", None),
    ("http.admin.token.file", str, "",
     "File holding the console's admin token (at least 16 visible ASCII characters; a "
     "trailing newline is ignored); required when http.admin.enable is true. The start "
     "is refused in one line when it is missing, unreadable, a symbolic link, not a "
     "regular file, open to group or others in any way (chmod 600), or too short.", None),
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
    from hostbroker.config import parse_listener

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


def setting_default(key: str):
    """The default of the setting ``key`` of this module."""
    for row in HTTP_SETTINGS:
        if row[0] == key:
            return row[2]
    raise KeyError(key)
