"""Fixtures of the hostile-client suite: one fuzz broker for the package, the seed.

``HB_FUZZ_SEED`` changes the seed (default :data:`~tests.hostile.fuzzlib.DEFAULT_SEED`);
every failure report names it. Tests taking ``session`` are checked after
each one (:meth:`~tests.hostile.runner.Session.check`): no worker replaced, a
normal client answered promptly, the tree's memory within its bound, the
witness data intact.
"""

from __future__ import annotations

import os

import pytest

from tests.hostile.fuzzlib import DEFAULT_SEED, FUZZ_BROKER_SETTINGS
from tests.hostile.invariants import Tree
from tests.hostile.runner import Session
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill

SEED = int(os.environ.get("HB_FUZZ_SEED", DEFAULT_SEED))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and "tests/hostile/" in str(item.fspath):
        report.sections.append(("hostile seed", f"HB_FUZZ_SEED={SEED}"))


@pytest.fixture(scope="session")
def seed() -> int:
    return SEED


@pytest.fixture(scope="package")
def fuzz_session(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("hostile"))
    broker.settings.update(FUZZ_BROKER_SETTINGS)
    broker.start()
    session = Session(broker, SEED)
    session.setup()
    yield session
    stop_or_kill(broker)


@pytest.fixture
def session(fuzz_session):
    """The package's fuzz session; every invariant is checked after the test.

    A worker replaced by an earlier test is that test's failure: the
    comparison starts from the workers running now.
    """
    if fuzz_session.broker.proc is None or fuzz_session.broker.proc.poll() is not None:
        fuzz_session.broker.proc = None
        fuzz_session.broker.start()
        fuzz_session.tree = None
    if fuzz_session.tree is None:
        fuzz_session.tree = Tree(fuzz_session.broker.proc.pid)
    fuzz_session.tree.rebase()
    yield fuzz_session
    fuzz_session.check()
