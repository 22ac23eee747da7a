"""How the suite is split between pytest-xdist workers (``-n N --dist loadgroup``),
and what every test process shares: one ZooKeeper per test module for cluster
mode's ``zookeeper`` fixture, and SIGINT and SIGTERM as a test found them.

Every test gets an ``xdist_group`` mark, so that a group runs whole on one
worker and its module, package and session fixtures are set up once there:

- a test module is a group of its own (as ``--dist loadfile`` would make it);
- the modules of ``tests/hostile/`` whose tests take the package's fuzz broker
  (the ``fuzz_session`` fixture) are one group (:data:`FUZZ_GROUP`), so one
  worker starts that broker; the package's other modules are groups of their own;
- ``tests/access/`` is one group: its session fixture makes and removes the
  system users its clients run as, which two workers would do over each other;
- the Spark modules that start a SparkSession are three groups
  (:data:`SPARK_GROUPS`, ``test_cluster.py`` alone and ``test_loader.py`` alone):
  the session is per worker (a JVM of up to 1 GiB, about 20 s of CPU to start and
  warm), and no Spark group is so long that it alone keeps the run going.

The groups are also sent out longest first (:data:`LONG_GROUPS`, from the
durations of a full run), so that no long group starts last and keeps one
worker busy after the others are done. Without ``-n`` all this changes
nothing but the order of the groups.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import time

import pytest

# Whole-package groups: one worker each.
PACKAGE_GROUPS = ("tests/access/",)

# The modules of tests/hostile/ that take its package-wide fuzz broker.
FUZZ_GROUP = "tests/hostile/+fuzz"
FUZZ_FIXTURE = "fuzz_session"

# The modules that use the SparkSession besides test_cluster.py and test_loader.py (each
# about as long as these four together, a group of its own): one group. (One group of
# all five, with one session fewer, took more CPU than the two.)
SPARK_GROUPS = {
    "tests/spark/test_read.py": "tests/spark/+read+ssl+stream+write",
    "tests/spark/test_ssl.py": "tests/spark/+read+ssl+stream+write",
    "tests/spark/test_stream.py": "tests/spark/+read+ssl+stream+write",
    "tests/spark/test_write.py": "tests/spark/+read+ssl+stream+write",
}

# The longest groups of a full run (at 1aa0a2e, six workers), longest first; the rest
# follow in collection order.
LONG_GROUPS = (
    "tests/spark/test_loader.py",
    "tests/spark/test_cluster.py",
    "tests/hostile/+fuzz",
    "tests/spark/+read+ssl+stream+write",
    "tests/quota/test_quota_broker.py",
    "tests/cluster/test_mirror_zk.py",
    "tests/cluster/test_controller.py",
    "tests/cluster/test_e2e_zk.py",
    "tests/access/",
    "tests/replication/test_random_faults.py",
    "tests/replication/test_clients.py",
    "tests/console/test_browser.py",
    "tests/cluster/test_broker_registration.py",
    "tests/quota/test_client_throttle.py",
    "tests/integration/test_storage_faults.py",
    "tests/cluster/test_group_zk.py",
    "tests/integration/test_local_fetch.py",
    "tests/hostile/test_http_output.py",
    "tests/integration/test_faults.py",
)


def group_of(nodeid: str, fuzz_modules: frozenset[str] = frozenset()) -> str:
    """The xdist group of a test: its package for PACKAGE_GROUPS, FUZZ_GROUP for the
    modules in ``fuzz_modules``, its Spark group for SPARK_GROUPS, else its module file."""
    path = nodeid.split("::", 1)[0]
    if path in SPARK_GROUPS:
        return SPARK_GROUPS[path]
    if path in fuzz_modules:
        return FUZZ_GROUP
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
    # A module is in the fuzz group whole when any of its tests takes the fuzz broker.
    fuzz = frozenset(item.nodeid.split("::", 1)[0] for item in items
                     if item.nodeid.startswith("tests/hostile/")
                     and FUZZ_FIXTURE in getattr(item, "fixturenames", ()))
    groups = {item.nodeid: group_of(item.nodeid, fuzz) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    # sort is stable: within a rank, groups and tests keep their collection order
    items.sort(key=lambda item: _rank(groups[item.nodeid]))


@pytest.fixture(scope="module")
def zookeeper_of_module(tmp_path_factory):
    """One real ZooKeeper for a test module (stopped by PID after it): the server
    behind ``tests/cluster/conftest.py``'s ``zookeeper``, which gives each test a
    chroot of its own on it; here, so that every package that imports that fixture
    sees it. One ZooKeeper JVM per module, not per test. (One per worker, kept for
    the whole run, was tried: the runs with it took a minute longer.)"""
    from tests.cluster.zkserver import ZooKeeperServer

    server = ZooKeeperServer(tmp_path_factory.mktemp("zk")).start()
    yield server
    server.stop()


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

# HB_TEST_CPU=PREFIX: each test process appends a line for every test (the set-up and
# tear-down of its fixtures of any scope included) to PREFIX.<python version>.<worker>
# (gw0, ..., or main): "nodeid<TAB>wall s<TAB>CPU s<TAB>brokers started<TAB>began", the
# CPU counting every process the test started, "began" on the monotonic clock
# (docs/testing.md, "Where the time goes").
_CPU_REPORT = os.environ.get("HB_TEST_CPU", "")


def _cpu_seconds() -> float:
    """CPU used so far by this process and every process it started: its reaped
    children, and its live descendants with the children they reaped."""
    import psutil
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _broker_starts() -> int:
    broker = sys.modules.get("tests.integration.broker")
    return broker.Broker.starts if broker else 0


def _report_cpu(nodeid: str, began: float, cpu: float, starts: int) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    version = "%d.%d" % sys.version_info[:2]
    with open(f"{_CPU_REPORT}.{version}.{worker}", "a") as out:
        out.write(f"{nodeid}\t{time.monotonic() - began:.3f}\t{_cpu_seconds() - cpu:.3f}"
                  f"\t{_broker_starts() - starts}\t{began:.3f}\n")


def _inherited_stops() -> list[str]:
    """What a process started from here now would inherit of SIGINT and SIGTERM
    beyond their defaults: an ignore and a block survive exec (a Python handler
    does not)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    return ([f"{sig.name} ignored" for sig in _STOP_SIGNALS
             if signal.getsignal(sig) == signal.SIG_IGN]
            + [f"{sig.name} blocked" for sig in _STOP_SIGNALS if sig in blocked])


def _put_back_stops(dispositions: dict) -> None:
    for sig, disposition in dispositions.items():
        if signal.getsignal(sig) != disposition:
            signal.signal(sig, disposition)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """The suite starts from SIGINT and SIGTERM at their defaults, however it was
    started: a shell's ``&`` without job control hands it SIGINT ignored, which its
    brokers and commands would inherit (pyspark's SparkContext puts in a handler of
    its own, so only the workers that had no Spark session kept the ignore)."""
    if _inherited_stops():
        _put_back_stops({signal.SIGINT: signal.default_int_handler,
                         signal.SIGTERM: signal.SIG_DFL})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test (with the set-up and tear-down of its fixtures of any scope)
    leaves SIGINT and SIGTERM as it found them in this process: a test that ran
    code here which ignores, blocks or takes them (a worker's set-up, a hold of the
    CPU latency request) would otherwise hand that on to every broker a later test
    starts from this process, whose Ctrl-C would then be lost. They are put back;
    an ignore or a block, which a child inherits, is also named in a warning."""
    before = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    measure = _CPU_REPORT and (time.monotonic(), _cpu_seconds(), _broker_starts())
    try:
        return (yield)
    finally:
        if measure:
            _report_cpu(item.nodeid, *measure)
        left = _inherited_stops()
        _put_back_stops(before)
        if left:
            # the test's own report is made by now: the warning goes to the summary
            item.warn(pytest.PytestWarning(
                f"the test left {' and '.join(left)} in this process; put back"))
