"""How ``topics describe`` shows a topic: its partitions as a table's rows and as JSON.

Owns: the columns of the partition table, the rows of a METADATA topic,
the table printed with aligned columns, the JSON of a topic, and an error
code's name. Used by the standalone describe (:mod:`.topics`) and the
cluster one (:mod:`.topics_describe_zk`); imports nothing of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TextIO

COLUMNS = ("partition", "broker", "log start", "log end", "bytes", "log dir", "error")


def error_name(code) -> str:
    """An error code's name; a code this client does not know, as a number."""
    return getattr(code, "name", f"error code {code}")


def rows(topic) -> list[tuple[str, ...]]:
    return [
        (str(p.partition), str(p.broker_id), str(p.log_start_offset), str(p.log_end_offset),
         str(p.log_end_offset - p.log_start_offset), p.log_dir or "-", error_name(p.error_code))
        for p in sorted(topic.partitions, key=lambda p: p.partition)
    ]


def table(rows: Iterable[tuple[str, ...]], out: TextIO,
           columns: tuple[str, ...] = COLUMNS) -> None:
    rows = [columns, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(),
              file=out)


def as_json(topic) -> dict:
    return {
        "topic": topic.topic,
        "error": error_name(topic.error_code),
        "partitions": [
            {"partition": p.partition, "broker": p.broker_id,
             "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
             "log_dir": p.log_dir, "error": error_name(p.error_code)}
            for p in sorted(topic.partitions, key=lambda p: p.partition)
        ],
    }
