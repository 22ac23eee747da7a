"""``hostbroker topics create|list|describe|delete``: topic admin over the wire.

Each subcommand is one request through :class:`SimpleClient` (CREATE_TOPIC,
METADATA, DELETE_TOPIC). Topic configs given to ``create`` are checked here
with the broker's own rules (:class:`hostbroker.log.config.LogConfig`) before
any connection is made, so a typo is a usage error, not a broker error.

``describe`` prints, per partition, what METADATA says: the broker serving
it, the log start and end offsets, the log dir and the partition's error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TextIO

from hostbroker.commands import (
    DEFAULT_BOOTSTRAP,
    EXIT_BROKER,
    EXIT_OK,
    check_bootstrap,
    key_values,
    usage_error,
)

_COLUMNS = ("partition", "broker", "log start", "log end", "bytes", "log dir", "error")


def _name(code) -> str:
    """An error code's name; a code this client does not know, as a number."""
    return getattr(code, "name", f"error code {code}")


def _client(bootstrap: str):
    from hostbroker.client.simple import SimpleClient

    return SimpleClient(check_bootstrap(bootstrap), client_id="hostbroker-topics")


def create(topic: str, partitions: int, configs: Iterable[str] = (), *,
           bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout) -> int:
    """Create ``topic`` with ``partitions`` partitions and ``configs`` (``KEY=VALUE``) overrides."""
    from hostbroker.log.config import LogConfig
    from hostbroker.errors import InvalidTopicError
    from hostbroker.log.segments import validate_topic_name

    try:
        validate_topic_name(topic)
    except InvalidTopicError as exc:
        raise usage_error(str(exc)) from None
    if partitions < 1:
        raise usage_error(f"--partitions must be at least 1, not {partitions}")
    configs = key_values("--config", configs)
    LogConfig().with_overrides(configs)
    with _client(bootstrap) as client:
        client.create_topic(topic, partitions, configs)
    suffix = "".join(f" {key}={value}" for key, value in configs.items())
    print(f"created topic {topic} with {partitions} partition"
          f"{'s' if partitions != 1 else ''}{suffix}", file=out)
    return EXIT_OK


def delete(topic: str, *, bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout) -> int:
    """Delete ``topic`` and its data."""
    with _client(bootstrap) as client:
        client.delete_topic(topic)
    print(f"deleted topic {topic}", file=out)
    return EXIT_OK


def list_topics(*, bootstrap: str = DEFAULT_BOOTSTRAP, out: TextIO = sys.stdout) -> int:
    """Print every topic name, one a line, sorted."""
    with _client(bootstrap) as client:
        response = client.metadata()
    for name in sorted(t.topic for t in response.topics):
        print(name, file=out)
    return EXIT_OK


def _rows(topic) -> list[tuple[str, ...]]:
    return [
        (str(p.partition), str(p.broker_id), str(p.log_start_offset), str(p.log_end_offset),
         str(p.log_end_offset - p.log_start_offset), p.log_dir or "-", _name(p.error_code))
        for p in sorted(topic.partitions, key=lambda p: p.partition)
    ]


def _table(rows: Iterable[tuple[str, ...]], out: TextIO) -> None:
    rows = [_COLUMNS, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(),
              file=out)


def _as_json(topic) -> dict:
    return {
        "topic": topic.topic,
        "error": _name(topic.error_code),
        "partitions": [
            {"partition": p.partition, "broker": p.broker_id,
             "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
             "log_dir": p.log_dir, "error": _name(p.error_code)}
            for p in sorted(topic.partitions, key=lambda p: p.partition)
        ],
    }


def describe(topics: list[str], *, as_json: bool = False, bootstrap: str = DEFAULT_BOOTSTRAP,
             out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Describe ``topics`` (every topic when empty), partition by partition.

    A topic the broker does not know is named on stderr and makes the exit
    status 1; the others are still described.
    """
    from hostbroker.errors import ErrorCode

    with _client(bootstrap) as client:
        response = client.metadata(topics)
    status = EXIT_OK
    found = []
    for topic in sorted(response.topics, key=lambda t: t.topic):
        if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            print(f"hostbroker topics describe: no topic {topic.topic}", file=err)
            status = EXIT_BROKER
            continue
        found.append(topic)
    if as_json:
        print(json.dumps([_as_json(t) for t in found], indent=2), file=out)
        return status
    for topic in found:
        error = "" if topic.error_code == ErrorCode.NONE else f"  error: {_name(topic.error_code)}"
        print(f"topic: {topic.topic}  partitions: {len(topic.partitions)}{error}", file=out)
        _table(_rows(topic), out)
    return status
