"""``hostbroker dump-log PATH``: the entries of segment files, and where they stop being valid.

Pure file reading, no broker: the file is mapped read-only and walked entry
by entry by its length fields. Each whole entry is shown with its offset (the
base offset from the file name plus its position), length, magic, codec and
whether its CRC matches; ``--deep`` also opens compressed wrappers and shows
the messages inside, and ``--print-payloads`` the payloads.

An entry is valid by the rules of docs/spec/log-format.md, the same ones
recovery applies (:func:`hostbroker.log.message.scan_valid_prefix`): length at
least 5 (v0) / 6 (v1) and at most ``--max-message-bytes``, magic 0 or 1, no
reserved attribute bits, matching CRC, whole. The file is valid up to its
first invalid entry; the summary names that byte and why. The walk goes on
past an invalid entry as long as its length field still frames it, since what
follows a torn write is often worth seeing, and stops at the first entry that
cannot be framed (it runs past the end of the file, or its length is below
the minimum).

``--summary`` (without ``--deep``) takes the valid prefix from
:func:`~hostbroker.log.message.scan_valid_prefix` and walks only the rest.

Exit status: 0 when every file is valid to its end (and, with ``--deep``,
every wrapper opens into valid messages), 3 otherwise, 2 for a path that
cannot be read.
"""

from __future__ import annotations

import gzip
import json
import mmap
import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from hostbroker.exits import EXIT_INVALID_LOG, EXIT_OK, plural, usage_error
from hostbroker.log.message import (
    CODEC_GZIP,
    CODEC_NAMES,
    CODEC_NONE,
    DEFAULT_MAX_MESSAGE_BYTES,
    LENGTH_SIZE,
    MIN_LENGTH_V0,
    MIN_LENGTH_V1,
    crc32,
    scan_valid_prefix,
)
from hostbroker.log.segments import SEGMENT_SUFFIX, parse_segment_filename

_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_NO_LIMIT = 2**31 - 1  # entries inside a wrapper are bound by nothing but their frame


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a message set as found at ``position``.

    ``whole`` is False for the last thing a walk finds when it cannot frame
    an entry (too few bytes, or a length below the minimum); such an entry
    has only ``position``, ``length`` (None when even the length field is
    cut) and ``problem``. ``problem`` is None for a valid entry.
    """

    position: int
    length: int | None
    whole: bool
    problem: str | None = None
    magic: int | None = None
    codec: int | None = None
    stored_crc: int | None = None
    payload_start: int = 0
    end: int = 0

    @property
    def valid(self) -> bool:
        return self.problem is None


def _entry_problem(length: int, magic: int, attributes: int, stored: int, actual: int,
                   max_message_bytes: int) -> str | None:
    if length > max_message_bytes:
        return f"length {length} exceeds the maximum of {max_message_bytes}"
    if magic not in (0, 1):
        return f"unknown magic {magic - 256 if magic > 127 else magic}"
    if magic == 1 and length < MIN_LENGTH_V1:
        return f"length {length} is too short for magic 1"
    if magic == 1 and attributes > 2:
        return f"attributes 0x{attributes:02x} use a reserved codec or bit"
    if stored != actual:
        return f"CRC mismatch (stored 0x{stored:08x}, payload 0x{actual:08x})"
    return None


def walk(buf, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Iterator[Entry]:
    """Yield every entry of ``buf`` that its length field frames, valid or not.

    Ends after the last whole entry, or with one ``whole=False`` entry where
    the rest of ``buf`` cannot be framed.
    """
    view = memoryview(buf)
    size = len(view)
    pos = 0
    while pos < size:
        if size - pos < LENGTH_SIZE:
            yield Entry(pos, None, False, f"partial length field ({plural(size - pos, 'byte')} left)")
            return
        (length,) = _LENGTH.unpack_from(view, pos)
        if length < MIN_LENGTH_V0:
            yield Entry(pos, length, False, f"length {length} is below the minimum")
            return
        end = pos + LENGTH_SIZE + length
        if end > size:
            problem = (f"length {length} exceeds the maximum of {max_message_bytes}"
                       if length > max_message_bytes else
                       f"partial entry ({size - pos - LENGTH_SIZE} of {length} bytes present)")
            yield Entry(pos, length, False, problem)
            return
        magic = view[pos + 4]
        attributes = view[pos + 5] if magic == 1 else 0
        crc_at = pos + (6 if magic == 1 else 5)
        start = crc_at + 4
        (stored,) = _CRC.unpack_from(view, crc_at)
        problem = _entry_problem(length, magic, attributes, stored, crc32(view[start:end]),
                                 max_message_bytes)
        yield Entry(pos, length, True, problem, magic, attributes & 0x03, stored, start, end)
        pos = end


def _decompress(codec: int, data) -> bytes:
    import snappy

    if codec == CODEC_GZIP:
        return gzip.decompress(data)
    return snappy.decompress(bytes(data))


def _open_wrapper(entry: Entry, view) -> tuple[list[Entry], bytes, str | None]:
    """The inner entries of a valid wrapper, the decompressed set, and what is wrong inside."""
    try:
        inner = _decompress(entry.codec, view[entry.payload_start:entry.end])
    except Exception as exc:  # noqa: BLE001 - any failure of the codec is the finding
        return [], b"", f"{CODEC_NAMES[entry.codec]} payload does not decompress: {exc}"
    entries = list(walk(inner, _NO_LIMIT))
    for e in entries:
        if not e.valid:
            return entries, inner, f"inner entry at byte {e.position}: {e.problem}"
        if e.codec != CODEC_NONE:
            return entries, inner, f"inner entry at byte {e.position} is itself compressed"
    if not entries:
        return entries, inner, "compressed wrapper holds no messages"
    return entries, inner, None


def _text(value) -> str:
    if value is True or value is False:
        return "yes" if value else "no"
    return str(value)


def _payload_text(payload) -> str:
    return repr(bytes(payload))[2:-1]


@dataclass
class _Totals:
    entries: int = 0
    valid_entries: int = 0
    messages: int = 0
    valid_bytes: int | None = None  # the first invalid entry's position, once found
    stop_reason: str | None = None
    bad_wrappers: int = 0


class _Printer:
    """Writes entries and summaries as text lines or as JSON lines."""

    def __init__(self, out: TextIO, as_json: bool, payloads: bool):
        self.out = out
        self.as_json = as_json
        self.payloads = payloads

    def summary(self, fields: dict) -> None:
        if self.as_json:
            print(json.dumps({"type": "summary", **fields}), file=self.out)
            return
        counts = plural(fields['valid_entries'], "valid entry", "valid entries")
        if "messages" in fields:
            counts += f", {plural(fields['messages'], 'message')}"
        if "problem" not in fields:
            line = f"valid: all {plural(fields['size'], 'byte')}, {counts}"
        else:
            after = fields["size"] - fields["valid_bytes"]
            line = (f"not valid from byte {fields['valid_bytes']} (offset "
                    f"{fields['invalid_from_offset']}): {fields['problem']}; {counts} "
                    f"({plural(fields['valid_bytes'], 'byte')}) before it, "
                    f"{plural(after, 'byte')} from there")
        if fields.get("unreadable_wrappers"):
            wrappers = fields["unreadable_wrappers"]
            line += (f"; {plural(wrappers, 'compressed wrapper')} "
                     f"{'does' if wrappers == 1 else 'do'} not open")
        print(line, file=self.out)

    def record(self, kind: str, fields: dict, payload=None, indent: str = "") -> None:
        if self.payloads and payload is not None:
            fields["payload"] = _payload_text(payload)
        if self.as_json:
            print(json.dumps({"type": kind, **fields}), file=self.out)
            return
        text = "  ".join(f"{key.replace('_', ' ')}: {_text(value)}" for key, value in fields.items())
        print(f"{indent}{text}", file=self.out)


def _entry_fields(entry: Entry, offset: int) -> dict:
    fields: dict = {"offset": offset, "position": entry.position, "length": entry.length}
    if not entry.whole:
        fields["valid"] = False
        fields["problem"] = entry.problem
        return fields
    fields.update(magic=entry.magic,
                  codec=CODEC_NAMES.get(entry.codec, str(entry.codec)),
                  crc=f"0x{entry.stored_crc:08x}",
                  payload_size=entry.end - entry.payload_start,
                  valid=entry.valid)
    if entry.problem:
        fields["problem"] = entry.problem
    return fields


def _dump_file(path: str, base_offset: int, printer: _Printer, *, deep: bool,
               summary_only: bool, max_message_bytes: int) -> bool:
    """Dump one file; return whether it is valid to its end."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
    try:
        with memoryview(mapped if mapped is not None else b"") as view:
            totals = _dump_entries(view, base_offset, printer, deep=deep,
                                   summary_only=summary_only, max_message_bytes=max_message_bytes)
    finally:
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:
                # Views of it are still held by the frames of an exception on
                # its way out (a closed stdout); the map goes with them.
                pass
    valid_bytes = size if totals.valid_bytes is None else totals.valid_bytes
    summary = {"file": path, "base_offset": base_offset, "size": size,
               "entries": totals.entries, "valid_entries": totals.valid_entries,
               "valid_bytes": valid_bytes}
    if deep:
        summary["messages"] = totals.messages
        summary["unreadable_wrappers"] = totals.bad_wrappers
    if totals.stop_reason is not None:
        summary["invalid_from_offset"] = base_offset + valid_bytes
        summary["problem"] = totals.stop_reason
    printer.summary(summary)
    return totals.stop_reason is None and totals.bad_wrappers == 0


def _summarize_entries(view, max_message_bytes: int) -> _Totals:
    """Totals without a line per entry: the valid prefix by the library's fast scan (what
    recovery runs), then a walk of the rest for the reason and the entries after it."""
    valid_bytes, valid_entries = scan_valid_prefix(view, max_message_bytes)
    totals = _Totals(entries=valid_entries, valid_entries=valid_entries, messages=valid_entries)
    if valid_bytes == len(view):
        return totals
    totals.valid_bytes = valid_bytes
    rest = list(walk(view[valid_bytes:], max_message_bytes))
    totals.stop_reason = rest[0].problem
    totals.entries += sum(entry.whole for entry in rest)
    return totals


def _dump_entries(view, base_offset: int, printer: _Printer, *, deep: bool,
                  summary_only: bool, max_message_bytes: int) -> _Totals:
    if summary_only and not deep:
        return _summarize_entries(view, max_message_bytes)
    totals = _Totals()
    for entry in walk(view, max_message_bytes):
        offset = base_offset + entry.position
        if entry.whole:
            totals.entries += 1
        if not entry.valid and totals.stop_reason is None:
            totals.valid_bytes = entry.position
            totals.stop_reason = entry.problem
        elif entry.valid and totals.stop_reason is None:
            totals.valid_entries += 1
        wrapper = entry.valid and entry.codec != CODEC_NONE
        if not summary_only:
            payload = view[entry.payload_start:entry.end] if entry.whole and not wrapper else None
            printer.record("entry", _entry_fields(entry, offset), payload)
        if not wrapper:
            totals.messages += entry.valid
            continue
        if not deep:
            continue
        inner_entries, inner, problem = _open_wrapper(entry, view)
        totals.messages += sum(e.valid for e in inner_entries)
        if problem is not None:
            totals.bad_wrappers += 1
        if summary_only:
            continue
        for inner_entry in inner_entries:
            fields = _entry_fields(inner_entry, offset)
            fields["position"] = inner_entry.position  # within the decompressed set
            payload = inner[inner_entry.payload_start:inner_entry.end] if inner_entry.whole else None
            printer.record("message", fields, payload, indent="    ")
        if problem is not None:
            printer.record("wrapper", {"offset": offset, "problem": problem}, indent="    ")
    return totals


def _segment_files(path: str) -> list[tuple[str, int]]:
    """(file, base offset) for a segment file, any other file, or a partition dir."""
    if os.path.isdir(path):
        found = sorted(
            (base, os.path.join(path, name))
            for name in os.listdir(path)
            if (base := parse_segment_filename(name)) is not None
        )
        if not found:
            raise usage_error(f"{path}: no *{SEGMENT_SUFFIX} segment files in this directory")
        return [(file, base) for base, file in found]
    base = parse_segment_filename(os.path.basename(path))
    return [(path, base if base is not None else 0)]


def dump(paths: list[str], *, deep: bool = False, print_payloads: bool = False,
         summary_only: bool = False, as_json: bool = False,
         max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, out: TextIO = sys.stdout) -> int:
    """Dump each of ``paths`` (segment files or partition dirs); see the module docstring.

    A file whose name is not a segment name is read as if its base offset
    were 0. Returns 0 when all are valid, 3 when any is not.
    """
    if max_message_bytes < MIN_LENGTH_V1:
        raise usage_error(f"--max-message-bytes must be at least {MIN_LENGTH_V1}")
    try:
        files = [item for path in paths for item in _segment_files(path)]
        for path, _ in files:
            if not os.access(path, os.R_OK) or not os.path.isfile(path):
                raise usage_error(f"{path}: not a readable file")
    except OSError as exc:
        raise usage_error(f"{exc.filename}: {exc.strerror}") from None
    printer = _Printer(out, as_json, print_payloads)
    all_valid = True
    for path, base in files:
        if not as_json:
            print(f"dumping {path} (base offset {base})", file=out)
        all_valid &= _dump_file(path, base, printer, deep=deep, summary_only=summary_only,
                                max_message_bytes=max_message_bytes)
    return EXIT_OK if all_valid else EXIT_INVALID_LOG
