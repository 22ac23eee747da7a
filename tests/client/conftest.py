import shutil
import tempfile

import pytest

from tests.client.fake_broker import FakeBroker


@pytest.fixture
def short_dir():
    # Unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    path = tempfile.mkdtemp(prefix="hb-client-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake_broker(short_dir):
    """Start a FakeBroker over a Unix socket: ``fake_broker(answer)``."""
    started = []

    def start(answer, *, tcp=False):
        broker = FakeBroker(answer, unix_path=None if tcp else f"{short_dir}/broker.sock")
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.close()
