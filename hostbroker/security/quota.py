"""Quotas: how fast one principal may go, and how long its answer waits when it goes faster.

Owns: :class:`Quota` (a principal's bounds: ``producer_byte_rate`` and
``consumer_byte_rate`` in bytes per second, ``request_rate`` in requests per
second; None: unbounded), :class:`QuotaSet` (the bounds of named principals
and the default for every other one; its file is :mod:`.store`'s) and the arithmetic of enforcement,
which is Kafka's:

- a principal's rate is measured over ``quota.window.num`` windows of
  ``quota.window.size.seconds`` each: what it did in the windows kept, over
  the time they span (the full windows and the current one so far, at least
  one window);
- past its bound, its answer is held (and its connection not read) for
  ``(rate - bound) / bound x span``: the time after which its rate over the
  same span falls back to the bound; at most ``quota.max.throttle.ms``;
- :class:`RateWindows` keeps one principal's windows, with the clock given
  to each call.

Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import dataclasses
import math

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_rate")
DEFAULT_ENTITY = "<default>"  # the entity of the bounds every principal without its own has
MAX_RATE = 2**53  # a bound past this is refused (a rate is worked out in floats)


@dataclasses.dataclass(frozen=True, slots=True)
class Quota:
    producer_byte_rate: int | None = None
    consumer_byte_rate: int | None = None
    request_rate: int | None = None

    def merged(self, changes: dict[str, int | None]) -> Quota:
        """This quota with ``changes`` applied (a None value removes that bound)."""
        for key, value in changes.items():
            check_bound(key, value)
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in QUOTA_KEYS if getattr(self, k) is not None}

    @property
    def empty(self) -> bool:
        return not self.as_dict()


def check_bound(key: str, value) -> None:
    if key not in QUOTA_KEYS:
        raise ValueError(f"quota {key[:40]!r}: expected one of {', '.join(QUOTA_KEYS)}")
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_RATE:
        raise ValueError(f"quota {key} {value!r}: expected a whole number from 1 to {MAX_RATE}")


@dataclasses.dataclass(frozen=True)
class QuotaSet:
    """Bounds by entity: a principal (``User:alice``) or :data:`DEFAULT_ENTITY`."""

    entities: dict[str, Quota] = dataclasses.field(default_factory=dict)

    def of(self, principal: str) -> Quota:
        """``principal``'s bounds, each rate on its own (as Kafka resolves them):
        its own where it has one, the default's where it has not."""
        default = self.entities.get(DEFAULT_ENTITY) or Quota()
        own = self.entities.get(principal)
        return dataclasses.replace(default, **own.as_dict()) if own else default

    def changed(self, entity: str, changes: dict[str, int | None]) -> QuotaSet:
        return self.changed_many([(entity, changes)])

    def changed_many(self, changes) -> QuotaSet:
        """The set with each ``(entity, {key: value or None})`` applied in
        turn (None removes that bound; an entity left with none goes), in one
        copy of the set."""
        entities = dict(self.entities)
        for entity, values in changes:
            quota = entities.get(entity, Quota()).merged(values)
            if quota.empty:
                entities.pop(entity, None)
            else:
                entities[entity] = quota
        return QuotaSet(entities)


def throttle_ms(rate: float, bound: float, span_s: float, max_ms: int) -> int:
    """How long an answer waits so that the rate over ``span_s`` falls back to
    ``bound`` (0 at or under it), at most ``max_ms``."""
    if rate <= bound:
        return 0
    return min(max_ms, math.ceil((rate - bound) / bound * span_s * 1000))


class RateWindows:
    """One principal's amounts over ``num`` windows of ``size_s`` seconds."""

    def __init__(self, num: int, size_s: float):
        if num < 2 or size_s <= 0:
            raise ValueError("quota windows: at least 2, each longer than 0 s")
        self.num, self.size_s = num, size_s
        self._amounts = [0.0] * num
        self._starts = [-math.inf] * num
        self._first = None

    def _window(self, now: float) -> int:
        index = int(now // self.size_s)
        slot = index % self.num
        start = index * self.size_s
        if self._starts[slot] != start:
            self._starts[slot] = start
            self._amounts[slot] = 0.0
        if self._first is None:
            self._first = start
        return slot

    def record(self, now: float, amount: float) -> None:
        self._amounts[self._window(now)] += amount

    def span(self, now: float) -> float:
        """The time the kept windows cover: the full ones and the current one so far
        (at least one window; less history at the start is not stretched)."""
        current = (now // self.size_s) * self.size_s
        earliest = max(current - (self.num - 1) * self.size_s, self._first or current)
        return max(self.size_s, now - earliest)

    def rate(self, now: float) -> float:
        self._window(now)
        oldest = (now // self.size_s - (self.num - 1)) * self.size_s
        total = sum(a for a, s in zip(self._amounts, self._starts) if s >= oldest)
        return total / self.span(now)
