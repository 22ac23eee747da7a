"""``dump-log`` into a pipe its reader closes early (``| head``): quiet, status 0."""

import subprocess
import sys

from hostbroker.log.message import encode_message_set


def test_a_closed_stdout_ends_dump_log_quietly(tmp_path):
    segment = tmp_path / "00000000000000000000.kafka"
    # Far more output than a pipe buffer holds: the writer is still writing when
    # the reader goes away.
    segment.write_bytes(encode_message_set([b"x" * 20] * 20000))
    proc = subprocess.Popen([sys.executable, "-m", "hostbroker", "dump-log", str(segment)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert first.startswith(b"dumping ")
    assert stderr == b""
