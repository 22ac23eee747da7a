"""Hostile data for consumers (issue 7, item 15): a gzip bomb and an
undecodable wrapper in a topic. The console consumer's peak memory stays
bounded, it says what is wrong in one line, and ``--skip-bad-messages`` reads
on past the bad entry."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
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


# A child's ru_maxrss counts the memory of the process it was forked from (the kernel
# keeps the larger of the two across exec): started from this test process, which may
# hold a Spark gateway or large answers by now, it would measure that. This small
# interpreter starts the consumer, reaps it with wait4 and writes its peak RSS (KiB).
_MEASURE = ("import os, subprocess, sys\n"
            "proc = subprocess.Popen(sys.argv[2:])\n"
            "_, status, usage = os.wait4(proc.pid, 0)\n"
            "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
            "sys.exit(os.waitstatus_to_exitcode(status) % 256)\n")


def consume(broker: Broker, topic: str, *extra: str) -> tuple[int, str, str, int]:
    """Run ``hostbroker consume``: status, stdout, stderr and its peak RSS in bytes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as peak:
        proc = subprocess.Popen(
            [sys.executable, "-c", _MEASURE, peak.name,
             sys.executable, "-m", "hostbroker", "consume", "--bootstrap", broker.unix,
             "--topic", topic, "--from-beginning", "--timeout-ms", "2000", *extra],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"hostbroker consume --topic {topic} did not end in 60s")
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), int(peak.read()) * 1024


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
