"""Fixtures of the tests of replicas across log dirs: one real broker per test
module on several log dirs, one of them optionally a small tmpfs (a real disk
that fills up, or that a test pulls away with ``umount -l``)."""

from __future__ import annotations

import contextlib
import os

import pytest

from tests.integration.broker import Broker
from tests.logdirs.support import SETTINGS
from tests.mounts import mount_tmpfs, unmount


@pytest.fixture(scope="module")
def dirs_broker(tmp_path_factory):
    """Factory, module-scoped: ``dirs_broker(n, small=None, start=True, **settings)``
    is a :class:`~tests.integration.broker.Broker` on ``n`` log dirs ``d0 .. d{n-1}``
    under a root of its own. With ``small`` (a tmpfs size, ``"4m"``) the last dir is
    a tmpfs of that size. The broker gets ``dirs`` (the paths, in ``log.dirs``
    order) and ``small`` (the tmpfs's path, or None). At the end of the module every
    broker is stopped (killed if it will not stop), its leftovers removed, and every
    tmpfs unmounted."""
    made: list[Broker] = []
    mounts: list[str] = []

    def make(n: int, small: str | None = None, start: bool = True, **settings) -> Broker:
        root = tmp_path_factory.mktemp("dirs")
        dirs = [str(root / f"d{i}") for i in range(n)]
        for path in dirs[:-1] if small else dirs:
            os.mkdir(path)
        if small:
            mount_tmpfs(dirs[-1], small)
            mounts.append(dirs[-1])
        broker = Broker(root, **{**SETTINGS, "log.dirs": ",".join(dirs), **settings})
        broker.dirs = dirs
        broker.small = dirs[-1] if small else None
        made.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in made:
        if broker.proc is not None:
            try:
                broker.stop(timeout=20)
            except Exception:  # noqa: BLE001 - already failing; make sure nothing is left
                broker.kill_tree()
        with contextlib.suppress(Exception):
            broker.remove_leftovers()
    for path in mounts:
        unmount(path)
