"""Run ``python -m hostbroker ...`` as a user would, for the test_cli_* tests.

Every run is bounded by a timeout; a run that outlives it is killed (by PID,
through subprocess) and fails the test.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator


def hostbroker(*args: str, input: bytes | None = None, timeout: float = 60.0,
               cwd: str | None = None) -> subprocess.CompletedProcess:
    """The finished process; stdout and stderr are bytes."""
    return subprocess.run([sys.executable, "-m", "hostbroker", *map(str, args)],
                          input=input, capture_output=True, timeout=timeout, cwd=cwd,
                          stdin=None if input is not None else subprocess.DEVNULL)


@contextlib.contextmanager
def running(*args: str) -> Iterator[subprocess.Popen]:
    """``python -m hostbroker ARGS`` in the background (stdout and stderr piped);
    killed on leaving the block if it is still running."""
    proc = subprocess.Popen([sys.executable, "-m", "hostbroker", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def terminate(proc: subprocess.Popen, timeout: float = 30.0) -> tuple[bytes, bytes]:
    """SIGTERM, as systemd or kill would send it; then its stdout and stderr."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=timeout)


def lines(result: subprocess.CompletedProcess) -> list[str]:
    return result.stdout.decode().splitlines()


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The single stderr line of a failed run (no traceback)."""
    text = result.stderr.decode()
    assert result.returncode != 0, result
    assert text.count("\n") == 1 and "Traceback" not in text, text
    return text.strip()
