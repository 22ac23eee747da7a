"""Hostile data for consumers (issue 7, item 15): a gzip bomb and an
undecodable wrapper in a topic. The console consumer's peak memory stays
bounded, it says what is wrong in one line, and ``--skip-bad-messages`` reads
on past the bad entry."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

from hostbroker.log.message import CODEC_GZIP, encode_message, encode_message_set
from tests.integration.broker import Broker
from tests.integration.wire_helpers import stop_or_kill

BOMB_INFLATED = 256 * 2**20
CONSUMER_PEAK_RSS = 200 * 2**20


def gzip_bomb(size: int) -> bytes:
    """A gzip stream of ``size`` zero bytes, compressed chunk by chunk (a few hundred KB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    parts = [compressor.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join(parts) + compressor.flush()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = Broker(tmp_path_factory.mktemp("consumers")).start()
    with broker.client() as client:
        for topic, bad in (("bomb", encode_message(gzip_bomb(BOMB_INFLATED), codec=CODEC_GZIP)),
                           ("broken", encode_message(b"\x1f\x8b not gzip at all",
                                                     codec=CODEC_GZIP))):
            client.create_topic(topic, 1)
            client.produce(topic, 0, encode_message_set([b"before"]))
            client.produce(topic, 0, bad)
            client.produce(topic, 0, encode_message_set([b"after"]))
    yield broker
    stop_or_kill(broker)


def consume(broker: Broker, topic: str, *extra: str) -> tuple[int, str, str, int]:
    """Run ``hostbroker consume``: status, stdout, stderr and its peak RSS in bytes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hostbroker", "consume", "--bootstrap", broker.unix,
             "--topic", topic, "--from-beginning", "--timeout-ms", "2000", *extra],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        pid = 0
        while pid == 0 and time.monotonic() < deadline:
            # wait4 reaps the child and gives its own peak RSS (ru_maxrss, KiB).
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            time.sleep(0.02)
        if pid == 0:
            proc.kill()
            os.waitpid(proc.pid, 0)
            raise AssertionError(f"hostbroker consume --topic {topic} did not end in 60s")
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss * 1024


@pytest.mark.parametrize("topic", ["bomb", "broken"])
def test_a_bad_wrapper_stops_the_console_consumer_with_one_line(served, topic):
    status, out, err, peak = consume(served, topic)
    assert peak < CONSUMER_PEAK_RSS, f"consumer peak RSS {peak / 2**20:.0f} MiB"
    assert out.splitlines()[:1] == ["before"]
    assert status != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("topic", ["bomb", "broken"])
def test_skip_bad_messages_reads_on_past_a_bad_wrapper(served, topic):
    status, out, err, peak = consume(served, topic, "--skip-bad-messages")
    assert peak < CONSUMER_PEAK_RSS, f"consumer peak RSS {peak / 2**20:.0f} MiB"
    assert status == 0, err
    assert out.splitlines() == ["before", "after"]
    assert "Traceback" not in err and err.strip(), "the skip is not reported"
