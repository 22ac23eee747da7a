import os
import subprocess

import pytest

from hostbroker.log.message import Message, encode_message_set, iter_messages
from hostbroker.log.segments import fetch_range


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def immutable():
    """``immutable(path)``: ``chattr +i`` on it until the test ends (root may then not
    write, rename or remove it); ``immutable.clear(path)`` ends it sooner."""
    flagged = []

    def flag(path: str) -> None:
        subprocess.run(["chattr", "+i", path], check=True)
        flagged.append(path)

    def clear(path: str) -> None:
        subprocess.run(["chattr", "-i", path], check=True)
        flagged.remove(path)

    flag.clear = clear
    yield flag
    for path in reversed(flagged):
        subprocess.run(["chattr", "-i", path], check=True)


def read_range(log, offset: int, max_bytes: int) -> bytes:
    """Read what a fetch at ``offset`` would send, the way a handler does."""
    index, position, length = fetch_range(log.segment_bases, log.log_end_offset, offset, max_bytes)
    with open(log.segment_path(log.segment_bases[index]), "rb") as segment:
        segment.seek(position)
        data = segment.read(length)
    assert len(data) == length
    return data


def read_all(log, max_bytes: int = 4096) -> list[Message]:
    """Every message from the log start to the log end, by repeated fetches."""
    messages: list[Message] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batch = list(iter_messages(read_range(log, offset, max_bytes), offset))
        assert batch, f"no whole entry at {offset} within {max_bytes} bytes"
        messages += batch
        offset = batch[-1].next_offset
    return messages


def segment_files(path) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.endswith(".kafka"))


def entries(count: int, tag: bytes = b"x") -> bytes:
    """``count`` entries of 100 bytes each (magic 1, 90-byte payloads)."""
    return encode_message_set([tag * 90] * count)
