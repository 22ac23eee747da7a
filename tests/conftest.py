"""How the suite is split between pytest-xdist workers (``-n N --dist loadgroup``).

Every test gets an ``xdist_group`` mark, so that a group runs whole on one
worker and its module, package and session fixtures are set up once there:

- a test module is a group of its own (as ``--dist loadfile`` would make it);
- ``tests/hostile/`` is one group, as its fuzz broker is a package fixture.

A worker that runs Spark tests starts its own SparkSession (the fixture is
per session, so per worker) and keeps it for every Spark module it is given.

The groups are also sent out longest first (:data:`LONG_GROUPS`, from the
durations of a full run), so that no long group starts last and keeps one
worker busy after the others are done. Without ``-n`` all this changes
nothing but the order of the groups.
"""

from __future__ import annotations

import signal
import warnings

import pytest

# Whole-package groups: one worker each.
PACKAGE_GROUPS = ("tests/hostile/",)

# The longest groups of a full run, longest first; the rest follow in collection order.
LONG_GROUPS = (
    "tests/spark/test_read.py",
    "tests/spark/test_cluster.py",
    "tests/integration/test_storage_faults.py",
    "tests/spark/test_loader.py",
    "tests/cluster/test_mirror_zk.py",
    "tests/integration/test_faults.py",
    "tests/spark/test_stream.py",
    "tests/cluster/test_e2e_zk.py",
    "tests/replication/test_random_faults.py",
    "tests/replication/test_zk_group.py",
    "tests/replication/test_failover.py",
    "tests/cluster/test_controller.py",
    "tests/cluster/test_replica_follow.py",
    "tests/replication/test_clients.py",
    "tests/spark/test_write.py",
    "tests/integration/test_processor.py",
    "tests/cluster/test_group_zk.py",
)


def group_of(nodeid: str) -> str:
    """The xdist group of a test: its package for PACKAGE_GROUPS, else its module file."""
    path = nodeid.split("::", 1)[0]
    for package in PACKAGE_GROUPS:
        if path.startswith(package):
            return package
    return path


def _rank(group: str) -> int:
    for rank, prefix in enumerate(LONG_GROUPS):
        if group.startswith(prefix):
            return rank
    return len(LONG_GROUPS)


def pytest_configure(config):
    # pytest-xdist registers the mark too; without it installed the mark is still known
    config.addinivalue_line("markers", "xdist_group(name): run the group whole on one worker")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # tryfirst: xdist reads the marks in its own hook of the same name, after this one.
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item.nodeid)))
    # sort is stable: within a rank, groups and tests keep their collection order
    items.sort(key=lambda item: _rank(group_of(item.nodeid)))


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def _stop_signals_as_they_were():
    """Every test leaves SIGINT and SIGTERM as it found them in this process: a test
    that ran code which ignores or blocks them here (a worker's set-up, a hold of the
    CPU latency request) would otherwise hand that on to every broker a later test
    starts from this process, whose Ctrl-C would then be lost. Such a test is named in
    a warning, and the signals are put back."""
    before = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    yield
    changed = [sig.name for sig in _STOP_SIGNALS if signal.getsignal(sig) != before[sig]]
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ()) & set(_STOP_SIGNALS)
    for sig in _STOP_SIGNALS:
        signal.signal(sig, before[sig])
    if blocked:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
    if changed or blocked:
        warnings.warn(f"the test left {', '.join(changed)} changed and "
                      f"{', '.join(s.name for s in blocked) or 'nothing'} blocked; put back",
                      stacklevel=1)
