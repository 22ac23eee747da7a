"""Kazoo clients made from ``zookeeper.connect`` strings.

The string is read by :func:`hostbroker.zkconnect.parse_connect` (pure, below
the settings). :func:`make_client` returns a started :class:`kazoo.client.KazooClient`
with the session timeout asked for, rooted at the chroot (which it creates
when missing), or raises :class:`ZooKeeperUnavailable` with one line when no
server answered within the connection timeout.
"""

from __future__ import annotations

import logging

from hostbroker.zkconnect import parse_connect

log = logging.getLogger(__name__)


class ZooKeeperUnavailable(RuntimeError):
    """No ZooKeeper server of a connect string answered in time."""


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
