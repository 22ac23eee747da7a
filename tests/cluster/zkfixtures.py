"""Shared pieces of the ZooKeeper tests of replication: one real ZooKeeper per
test module (import the :func:`zkserver` fixture), kazoo clients on it (at its
root, or in a chroot of a test's own so that tests never see each other's
nodes), a recorder of the problems a reader reports, and a broker stop that
leaves nothing behind."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.cluster.zkserver import ZooKeeperServer


@pytest.fixture(scope="module")
def zkserver(tmp_path_factory):
    """A ZooKeeper of this test module's own (stopped by PID after it)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    yield server
    server.stop()


_roots = itertools.count()


@pytest.fixture
def cluster(zkserver):
    """(connect string with this test's own chroot, a kazoo client rooted there)."""
    with chrooted(zkserver.connect, f"/t{next(_roots)}") as found:
        yield found


@contextmanager
def kazoo(hosts: str) -> Iterator:
    """A started kazoo client on ``hosts`` (a connect string, chroot allowed)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=5.0)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@contextmanager
def chrooted(connect: str, chroot: str) -> Iterator[tuple[str, object]]:
    """(``connect`` + ``chroot``, a kazoo client rooted there), the chroot made first."""
    with kazoo(connect) as root:
        root.ensure_path(chroot)
    with kazoo(connect + chroot) as client:
        yield connect + chroot, client


class Said:
    """A ``report(path, problem)`` callable that keeps every line."""

    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __call__(self, path: str, problem: str) -> None:
        self.lines.append((path, problem))

