"""What a new user runs into first, as subprocesses against a real ``hostbroker serve``.

A misspelt topic (``consume --group`` waits for nothing, ``produce`` creates it), an
unknown group, ``groups describe`` without ``--topic``, a broker that is not there,
and counts said in the right number.

Brokers: the misspelt-topic and groups tests, and the mirror's source, share one
module-scoped broker (each test with its own topic and group names); the mirror's
destination and the serve tests keep their own (those stop, kill or signal it).
"""

from __future__ import annotations

import io
import os
import time

import pytest

from hostbroker.client import DeliveryError, Producer
from hostbroker.client.coordinator_requests import CoordinatorClient
from hostbroker.commands.dumplog import dump
from hostbroker.config import Config
from hostbroker.log.message import encode_message_set
from hostbroker.log.segments import segment_filename
from hostbroker.workers.plan import shm_token
from tests.integration.broker import Broker
from tests.integration.cli import hostbroker, lines, one_line_error, running
from tests.integration.wire_helpers import module_broker, stop_or_kill


# one broker for the tests that only add their own topics and groups to it
broker = module_broker()


def _stable(uri: str, group: str) -> bool:
    client = CoordinatorClient([uri], timeout=10, client_id="test")
    try:
        answer = client.describe_group(group)
    finally:
        client.close()
    return answer.phase == "STABLE" and any(m.assignment for m in answer.members)


def _poll(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


# -- misspelt topics ------------------------------------------------------------


def test_consume_group_of_a_missing_topic_says_it_waits(broker):
    # Before: it joined the group and waited for the topic without a word.
    result = hostbroker("consume", "--bootstrap", broker.unix, "--topic", "c_page_veiws",
                        "--group", "c_reports", "--timeout-ms", "1000", timeout=60)
    assert result.returncode == 0 and result.stdout == b""
    assert result.stderr.decode() == ("hostbroker consume: no topic c_page_veiws yet; waiting for "
                                      "it (Ctrl-C stops; --timeout-ms gives up)\n")
    with broker.client() as client:
        (found,) = client.metadata(["c_page_veiws"]).topics
    assert found.partitions == ()  # looking did not create it
    # Waiting is what a pipeline that starts its consumers first relies on.
    with running("consume", "--bootstrap", broker.unix, "--topic", "c_later", "--group", "c_g",
                 "--from-beginning", "--max-messages", "1") as waiting:
        assert waiting.stderr.readline().startswith(b"hostbroker consume: no topic c_later yet")
        with broker.client() as client:
            client.create_topic("c_later", 1)
            client.produce("c_later", 0, encode_message_set([b"first"]))
        out, _ = waiting.communicate(timeout=60)
    assert (waiting.returncode, out) == (0, b"first\n")


def test_produce_to_a_new_topic_says_so_once(broker):
    with broker.client() as client:
        client.create_topic("p_page_views", 2)
    first = hostbroker("produce", "--bootstrap", broker.unix, "--topic", "p_page_veiws",
                       input=b"a\nb\nc\n")
    assert first.returncode == 0, first.stderr
    said = first.stderr.decode().splitlines()
    assert len(said) == 1 and said[0].startswith(
        "hostbroker produce: topic p_page_veiws does not exist; the first message creates it")
    again = hostbroker("produce", "--bootstrap", broker.unix, "--topic", "p_page_veiws",
                       input=b"d\n")
    known = hostbroker("produce", "--bootstrap", broker.unix, "--topic", "p_page_views",
                       input=b"e\n")
    assert (again.returncode, again.stderr, known.returncode, known.stderr) == (0, b"", 0, b"")


# -- groups describe ---------------------------------------------------------------


def test_groups_describe_of_an_unknown_group_is_an_error(broker):
    with broker.client() as client:
        client.create_topic("u_page_views", 2)
    named = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "u_nobody",
                       "--topic", "u_page_views")
    assert one_line_error(named) == (
        f"hostbroker groups describe: no group u_nobody on the broker at {broker.unix}: "
        "no members, and no offset committed on u_page_views")
    assert named.returncode == 1
    bare = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "u_nobody")
    assert one_line_error(bare) == (
        f"hostbroker groups describe: no group u_nobody on the broker at {broker.unix}: "
        "no members and no committed offset")
    assert bare.returncode == 1
    as_json = hostbroker("groups", "describe", "--bootstrap", broker.unix, "--group", "u_nobody",
                         "--topic", "u_page_views", "--json")
    assert as_json.returncode == 1 and as_json.stdout == b""


def test_groups_describe_without_topic_shows_what_the_members_subscribe_to(broker):
    with broker.client() as client:
        client.create_topic("m_page_views", 2)
        client.produce("m_page_views", 0, encode_message_set([b"x", b"y"]))
    with running("consume", "--bootstrap", broker.unix, "--topic", "m_page_views",
                 "--group", "m_reports", "--from-beginning"):
        _poll(lambda: _stable(broker.unix, "m_reports"), 30, "the consumer holds its streams")
        result = hostbroker("groups", "describe", "--bootstrap", broker.unix,
                            "--group", "m_reports")
    assert result.returncode == 0, result.stderr
    shown = lines(result)
    assert shown[0].startswith("group: m_reports  generation ")
    rows = [line.split() for line in shown if line.startswith("m_page_views")]
    assert [row[1] for row in rows] == ["0", "1"]


# -- a broker that is not there -------------------------------------------------------


def test_an_unreachable_broker_is_named_by_the_producer(tmp_path):
    uri = f"unix://{tmp_path}/hb.sock"
    producer = Producer(uri, {"producer.type": "sync", "message.send.max.retries": 0})
    try:
        with pytest.raises(DeliveryError) as failed:
            producer.send("events", b"x")
    finally:
        producer.close()
    text = str(failed.value)
    # Before: "1 messages not delivered; first: events/None: [Errno 2] No such file ..."
    assert text == (f"1 message not delivered; first: events: cannot reach {uri}: "
                    "[Errno 2] No such file or directory")
    result = hostbroker("produce", "--bootstrap", uri, "--topic", "events", input=b"x\n")
    assert one_line_error(result).startswith(
        "hostbroker produce: 1 of 1 message not acknowledged (first: events")
    assert f": cannot reach {uri}: [Errno 2] No such file or directory)" in result.stderr.decode()


# -- counts in the right number ---------------------------------------------------------


def test_dump_log_says_one_entry_and_one_message(tmp_path):
    path = tmp_path / segment_filename(0)
    path.write_bytes(encode_message_set([b"one"]))
    out = io.StringIO()
    assert dump([str(path)], out=out) == 0
    # Before: "1 valid entries"
    assert out.getvalue().splitlines()[-1].endswith(", 1 valid entry")
    path.write_bytes(encode_message_set([b"one"]) + b"\x00")
    out = io.StringIO()
    assert dump([str(path)], out=out) == 3
    # Before: "partial length field (1 bytes left)"
    assert "partial length field (1 byte left); 1 valid entry (" in out.getvalue().splitlines()[-1]


def test_mirror_of_nothing_names_no_topic(broker, tmp_path):
    source = broker  # the shared one: no test of the module has a topic orders.*
    (tmp_path / "dst").mkdir()
    destination = Broker(tmp_path / "dst").start()
    try:
        result = hostbroker("mirror", "--from", source.unix, "--to", destination.unix,
                            "--topics", "orders.*", "--group", "mirror_copier",
                            "--timeout-ms", "300")
    finally:
        destination.stop(timeout=20)
    assert result.returncode == 0, result.stderr
    # Before: "mirrored 0 messages of no topic from ..."
    assert lines(result) == [f"mirrored 0 messages from {source.unix} to {destination.unix}"]


# -- serve: Ctrl-C while starting, a clean stop, a recovery ------------------------------


# Run by a parent that ignores SIGINT (a shell's `&` without job control) and blocks
# SIGINT and SIGTERM: both survive exec, which this launcher does next.
_IGNORED_AND_BLOCKED = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")


def _launcher(inherited: str) -> list[str]:
    import sys

    if inherited == "ignored and blocked":
        return [sys.executable, "-c", _IGNORED_AND_BLOCKED]
    return [sys.executable]


@pytest.mark.parametrize("inherited", ["as from a terminal", "ignored and blocked"])
def test_ctrl_c_while_the_configuration_is_read_is_one_line(tmp_path, inherited):
    import errno
    import signal
    import subprocess

    fifo = tmp_path / "hostbroker.toml"
    os.mkfifo(fifo)  # a read that waits for a writer: the start-up stays where it is
    proc = subprocess.Popen([*_launcher(inherited), "-m", "hostbroker", "serve",
                             "--config", str(fifo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    writer = None
    try:
        # Opening the write end succeeds once the broker opened the read end (ENXIO
        # before): it is reading the configuration then, whatever the machine's load,
        # and its read waits for as long as the write end stays open.
        deadline = time.monotonic() + 30
        while writer is None:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.02)
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if writer is not None:
            os.close(writer)
    # Before: a KeyboardInterrupt traceback and death by SIGINT.
    assert (proc.returncode, out, err) == (0, b"", b"hostbroker: stopped while starting\n")


def test_a_clean_stop_and_a_recovery_each_say_one_line(tmp_path):
    broker = Broker(tmp_path).start()
    try:
        with broker.client() as client:
            client.create_topic("t", 2)
            client.produce("t", 0, encode_message_set([b"x"]))
        assert broker.stop(timeout=20) == 0
        stopped = [line for line in broker.log().splitlines() if "stopped cleanly" in line]
        assert len(stopped) == 1 and stopped[0].startswith(
            "hostbroker: stopped cleanly after serving for "), broker.log()
        broker.start()
        broker.kill_tree()
        broker.proc = None
        broker.start()
    finally:
        broker.stop(timeout=20)
    logs = os.path.join(broker.root, "logs")
    recovered = [line for line in broker.log().splitlines() if "recovered" in line]
    assert len(recovered) == 1, broker.log()
    assert recovered[0].startswith(f"hostbroker: hb-writer-0 recovered 2 partitions of log dir "
                                   f"{logs} after an unclean shutdown"), recovered


def test_ctrl_c_stops_a_broker_that_inherited_it_ignored_and_blocked(tmp_path):
    """`hostbroker serve` does not depend on what its parent left: Ctrl-C stops it
    cleanly, and its workers (which inherit its mask) drain on the supervisor's
    SIGTERM."""
    import signal

    broker = Broker(tmp_path)
    broker.args = lambda: [*_launcher("ignored and blocked"), *Broker.args(broker)[1:]]
    broker.start()
    try:
        with broker.client() as client:
            client.create_topic("t", 1)
            client.produce("t", 0, encode_message_set([b"x"]))
        broker.proc.send_signal(signal.SIGINT)
        # Before: SIGINT stayed blocked in the supervisor and the broker served on.
        assert broker.proc.wait(timeout=20) == 0
    finally:
        stop_or_kill(broker)
    assert "hostbroker: stopped cleanly after serving for " in broker.log(), broker.log()


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_ctrl_c_while_the_supervisor_prepares_is_one_line(tmp_path, signame):
    import signal
    import subprocess
    import sys

    # The broker lock is taken inside the supervisor's preparation, before the
    # listeners are bound and the shared memory made, and the signal handlers come
    # only after all of that: Ctrl-C as soon as the lock file is there lands in it.
    # SIGTERM (a service manager's stop) there stops the start the same way.
    for attempt in range(3):
        logs = tmp_path / f"logs-{attempt}"
        proc = subprocess.Popen([sys.executable, "-m", "hostbroker", "serve",
                                 "--set", f"listeners=unix://{tmp_path}/hb-{attempt}.sock",
                                 "--set", "http.listeners=",
                                 "--set", f"log.dirs={logs}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not (logs / ".broker.lock").exists():
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.001)
            proc.send_signal(getattr(signal, signame))
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # Before: a KeyboardInterrupt traceback from the supervisor's prepare().
        assert (proc.returncode, out, err) == (0, b"", b"hostbroker: stopped while starting\n")
        # and nothing left in shared memory: what is made there is made whole
        # before a stop asked for meanwhile comes, and the stop removes it all
        token = shm_token(Config.build(overrides=[f"log.dirs={logs}"]))
        assert [e for e in os.listdir("/dev/shm") if e.startswith(token)] == []
