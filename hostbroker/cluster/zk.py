"""``zookeeper.connect`` strings, and kazoo clients made from them.

:func:`parse_connect` checks ``host:port[,host:port...][/chroot]`` and raises
:class:`~hostbroker.errors.ConfigError` with one line naming what is wrong.
:func:`make_client` returns a started :class:`kazoo.client.KazooClient`
with the session timeout asked for, rooted at the chroot (which it creates
when missing), or raises :class:`ZooKeeperUnavailable` with one line when no
server answered within the connection timeout.
"""

from __future__ import annotations

import logging

from hostbroker.errors import ConfigError

log = logging.getLogger(__name__)


class ZooKeeperUnavailable(RuntimeError):
    """No ZooKeeper server of a connect string answered in time."""


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
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{key}: {item!r} is not host:port")
        hosts.append((host.strip("[]"), int(port)))
    return hosts, chroot


def make_client(connect: str, session_timeout_ms: int, connection_timeout_ms: int,
                key: str = "zookeeper.connect", read_only: bool = False):
    """A started kazoo client for ``connect`` (see the module docstring)."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    hosts, chroot = parse_connect(connect, key)
    host_list = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in hosts)
    client = KazooClient(hosts=host_list, timeout=session_timeout_ms / 1000.0,
                         read_only=read_only)
    try:
        client.start(timeout=connection_timeout_ms / 1000.0)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailable(
            f"{key}: no ZooKeeper server of {host_list} answered within "
            f"{connection_timeout_ms} ms") from None
    if chroot:
        client.ensure_path(chroot)
        client.chroot = chroot
    return client
