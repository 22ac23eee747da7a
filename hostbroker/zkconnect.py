"""``zookeeper.connect`` strings: ``host:port[,host:port...][/chroot]``.

:func:`parse_connect` checks one and raises :class:`~hostbroker.errors.ConfigError`
with one line naming what is wrong. Pure: no ZooKeeper, no sockets, so the
broker's settings (``hostbroker.config``), the clients and the Spark options
check a connect string without pulling in kazoo; ``hostbroker.cluster.zk``
makes the clients from what it returns.
"""

from __future__ import annotations

from hostbroker.errors import ConfigError


def parse_connect(value: str, key: str = "zookeeper.connect") -> tuple[list[tuple[str, int]], str]:
    """([(host, port), ...], chroot) of a connect string; chroot is "" or "/a/b"."""
    text = value.strip()
    if not text:
        raise ConfigError(f"{key}: empty (expected host:port[,host:port...][/chroot])")
    hosts_part, slash, chroot = text.partition("/")
    chroot = slash + chroot if slash else ""
    if chroot:
        parts = chroot.split("/")[1:]
        if chroot.endswith("/") or any(not p or p in (".", "..") for p in parts):
            raise ConfigError(f"{key}: chroot {chroot!r} is not a ZooKeeper path")
    hosts = []
    for item in hosts_part.split(","):
        item = item.strip()
        host, sep, port = item.rpartition(":")
        # ASCII digits only: str.isdigit() also takes '²' and '٢', which int() refuses or reads.
        if (not sep or not host or any(c.isspace() for c in host)
                or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536):
            raise ConfigError(f"{key}: {item!r} is not host:port")
        hosts.append((host.strip("[]"), int(port)))
    return hosts, chroot
