"""What the workers record into their shared stats (``shm/stats.py``).

Owns: the rules of counting, so every process counts alike. Each worker
that records holds a :class:`Recorder` over its own two regions
(``plan.stats_name`` and ``plan.api_stats_name`` of its kind and index):

- **requests and latency**: the processor alone (it sees every frame's key
  and every answer, whoever built it), from the frame's arrival to when its
  answer is handed over for writing (``Connection.started``);
- **errors**: wherever the answer is built, one per answer that carries a
  top-level or any partition's error code other than 0, or is an error
  frame (:func:`answer_has_error` looks at a response object with a check
  built once for its class; a builder that already knows may say it);
- **messages_in, bytes_in** of a partition: its writer, at each append of a
  produced message set (a follower's copies are not produced);
- **bytes_out, fetches** of a partition: whoever builds a FETCH answer
  (processors, handlers, writers' long polls; consumers and followers
  alike), per partition answered without error: :meth:`Recorder.fetched`.

Each process writes its own regions only. A partition slot's row counts
under the slot's ``claims`` (``shm/partitions.py``, bumped when the slot is
freed): a process about to count for a slot whose claims moved zeroes its
own row first, and the writer that frees a slot (a topic deleted, a damaged
partition given up) does so at once (:meth:`Recorder.freed`), so readers
leave every other process's old counts out and a topic created into the
slot later starts from zero (``shm/stats.py``).
"""

from __future__ import annotations

import dataclasses
import operator
import struct
import typing
from collections.abc import Callable

from hostbroker.shm import stats
from hostbroker.shm.partitions import PartitionTable
from hostbroker.shm.stats import ApiStats, PartitionStats

_ROW = stats.ROW_WORDS
# a counter's word in its row: after the row's claim
_BYTES_OUT = 1 + stats.BYTES_OUT
_FETCHES = 1 + stats.FETCHES
_MESSAGES_IN = 1 + stats.MESSAGES_IN
_BYTES_IN = 1 + stats.BYTES_IN


# a request frame's api key, its first field: what the processor and the
# handler read to know which API an answer is counted under
FRAME_KEY = struct.Struct(">h")

class Recorder:
    """One worker's handles on its own stats regions (attached in the child)."""

    def __init__(self, plan, kind: str, index: int):
        self.api = ApiStats.attach(plan.api_stats_name(kind, index))
        self.partitions = None
        self.words = None
        self.claims = None
        self.rows = 0
        if (kind, index) in plan.stats_workers():
            self.partitions = PartitionStats.attach(plan.stats_name(kind, index))
            self.words = self.partitions.words
            self._table = PartitionTable.attach(plan.table_name, readonly=True)
            self.claims = self._table.claims_view()
            self.rows = min(self.partitions.row_count, len(self.claims))
        self.request = self.api.request  # (api_key, latency_ns): the processor's

    def error(self, api_key: int, n: int = 1) -> None:
        """An answer of ``api_key`` with an error (see the module docstring)."""
        self.api.error(api_key, n)

    def appended(self, slot: int, messages: int, nbytes: int) -> None:
        """A writer appended ``messages`` produced messages, ``nbytes`` bytes, to ``slot``."""
        if 0 <= slot < self.rows:
            words, base, claim = self.words, slot * _ROW, self.claims[slot]
            if words[base] != claim:
                self.partitions.restamp(slot, claim)
            words[base + _MESSAGES_IN] += messages
            words[base + _BYTES_IN] += nbytes

    def fetched(self, parts, reads, piece_at: int = 4) -> bool:
        """Count a FETCH answer of ``parts`` (``answers.fetch_parts``' parts:
        topic, partition, error, log end, piece) whose slots are in ``reads``
        (``(slot, seen)`` each, as ``fetch_parts`` appends them; slot None:
        not in the table; in the same order); a part's piece is at
        ``piece_at`` (FETCH v1's parts: 6). True when a partition has an
        error. About 0.3 µs a partition: it runs for every partition of
        every FETCH answer."""
        words, rows, claims = self.words, self.rows, self.claims
        error = False
        for part, (slot, _) in zip(parts, reads):
            if part[2]:
                error = True
            elif slot is not None and slot < rows:
                base = slot * _ROW
                claim = claims[slot]
                if words[base] != claim:
                    self.partitions.restamp(slot, claim)
                words[base + _FETCHES] += 1
                piece = part[piece_at]
                if piece is not None:
                    words[base + _BYTES_OUT] += piece.length
        return error

    def freed(self, slot: int) -> None:
        """This writer freed ``slot`` (after ``PartitionTable.free``): zero
        its own row under the slot's new claim, so readers leave out every
        process's counts of the partition that had it."""
        if 0 <= slot < self.rows:
            self.partitions.restamp(slot, self.claims[slot])


class Unrecorded:
    """Counts nothing: a worker's ``stats`` until its ``init_process``
    attaches its own :class:`Recorder` (a worker object built without a
    process, as tests build one, records nowhere)."""

    partitions = words = claims = None
    rows = 0

    @staticmethod
    def request(api_key: int, latency_ns: int) -> None:
        pass

    @staticmethod
    def error(api_key: int, n: int = 1) -> None:
        pass

    @staticmethod
    def appended(slot: int, messages: int, nbytes: int) -> None:
        pass

    @staticmethod
    def fetched(parts, reads, piece_at: int = 4) -> bool:
        return any(part[2] for part in parts)

    @staticmethod
    def freed(slot: int) -> None:
        pass


UNRECORDED = Unrecorded()


# -- errors in a response object ----------------------------------------------
#
# Every answer a handler or the coordinator builds is looked at, so the look
# is compiled once per response class from its field annotations (as the
# codec is, protocol/schema.py): which field is its error code, and which
# fields are tuples of results worth looking into. A list of flat results
# (a PRODUCE answer's partitions) is then ``any(map(attrgetter("error_code"),
# ...))`` at C speed: about 0.4 ms for 10,000 partitions, where walking every
# result's fields generically cost 8 to 14 ms (docs/benchmarks-history.md).

_CHECKS: dict[type, Callable[[object], bool]] = {}
_BUILDING: set[type] = set()  # classes whose check is being built (a class nested in itself)


def _never(_response) -> bool:
    return False


def _result_classes(cls: type) -> list[tuple[str, type]]:
    """``(field, result class)`` of each field of ``cls`` that holds a tuple
    of dataclasses (``Array[X]``), from its annotations."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):
        hints = {}
    out = []
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        if typing.get_origin(hint) is tuple:
            args = typing.get_args(hint)
            if args and dataclasses.is_dataclass(args[0]) and isinstance(args[0], type):
                out.append((f.name, args[0]))
    return out


def _check_of(cls: type) -> Callable[[object], bool]:
    """The function that tells whether a ``cls`` carries an error code other
    than 0, at its top or in any of its results (built once per class)."""
    check = _CHECKS.get(cls)
    if check is not None:
        return check
    if cls in _BUILDING:  # results of its own kind: look the check up when called
        return lambda r: _CHECKS[cls](r)
    if not dataclasses.is_dataclass(cls):
        return _CHECKS.setdefault(cls, lambda r: bool(getattr(r, "error_code", 0)))
    names = {f.name for f in dataclasses.fields(cls)}
    code = operator.attrgetter("error_code") if "error_code" in names else None
    nested = []
    _BUILDING.add(cls)
    try:
        for name, item in _result_classes(cls):
            item_check = _check_of(item)
            if item_check is _never:
                continue
            get = operator.attrgetter(name)
            flat = not _result_classes(item)
            if flat and "error_code" in {f.name for f in dataclasses.fields(item)}:
                item_code = operator.attrgetter("error_code")
                nested.append(lambda r, get=get, c=item_code: any(map(c, get(r))))
            else:
                nested.append(lambda r, get=get, c=item_check: any(map(c, get(r))))
    finally:
        _BUILDING.discard(cls)
    if code is None and not nested:
        check = _never
    elif code is None and len(nested) == 1:
        check = nested[0]
    elif not nested:
        def check(r, code=code):
            return bool(code(r))
    else:
        def check(r, code=code, nested=tuple(nested)):
            if code is not None and code(r):
                return True
            return any(n(r) for n in nested)
    _CHECKS[cls] = check
    return check


def answer_has_error(response) -> bool:
    """Whether a response (a protocol dataclass) carries an error code other
    than 0, at its top or in any of its results (topics, partitions,
    replicas): one call of the check built for its class."""
    check = _CHECKS.get(type(response))
    if check is None:
        check = _check_of(type(response))
    return check(response)


def attach_stats(plan, workers) -> tuple[list[PartitionStats], list[ApiStats]]:
    """Read-only handles on the stats regions of ``workers`` (``(kind,
    index)`` pairs: a reader's, such as ``hostbroker top``): their partition
    stats and their API stats, each list of those that exist. The caller
    closes them."""
    partitions, apis = [], []
    for kind, index in workers:
        for cls, name, out in ((PartitionStats, plan.stats_name(kind, index), partitions),
                               (ApiStats, plan.api_stats_name(kind, index), apis)):
            try:
                out.append(cls.attach(name, readonly=True))
            except FileNotFoundError:
                continue
    return partitions, apis
