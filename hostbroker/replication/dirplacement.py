"""Which log dirs of one standalone broker hold a topic's replicas (replicas
across log dirs, docs/storage.md).

For each partition in turn, :func:`place_replicas` takes the ``rf`` usable
dirs with the smallest ``(replicas, bytes, dir_id)``, preferring dirs on
distinct devices (``st_dev``) while enough of them exist, since two dirs on
one disk are separate failure domains only on paper. Of those, the dir that
leads fewest partitions goes first: it is the preferred leader. The loads
are updated as it goes, so one call balances a whole topic, and placing a
topic after another takes the first one's replicas into account.

Pure: the loads come from the caller (hb-logdirs reads them from the
partition table: replicas and leaders per owner, bytes the sum of
``end_offset - start_offset``), and the result is a plan, nothing done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from hostbroker.protocol.replica_fields import MAX_REPLICAS

__all__ = ["DirLoad", "place_replicas", "too_few_dirs"]


class DirLoad(NamedTuple):
    """What one log dir holds now. ``usable`` False: offline (or its writer
    gone), not placed on, but counted in the refusal's "(n offline)"."""

    replicas: int
    leaders: int
    bytes: int
    device: int
    usable: bool = True


def too_few_dirs(rf: int, usable: int, offline: int) -> str:
    """The one line refusing a replication factor larger than the usable dirs."""
    line = f"replication factor {rf} needs {rf} usable log dirs; the broker has {usable}"
    return line + (f" ({offline} offline)" if offline else "")


def place_replicas(dirs: Mapping[int, DirLoad], partitions: Sequence[int],
                   rf: int) -> dict[int, list[int]]:
    """``{partition: [dir ids]}`` for each of ``partitions``, the preferred
    leader first; ``dirs`` maps each log dir id to its load.

    Raises ValueError, with the line the refusal prints, for ``rf`` not 1 to
    :data:`MAX_REPLICAS` or larger than the number of usable dirs.
    """
    if not 1 <= rf <= MAX_REPLICAS:
        raise ValueError(f"replication factor {rf} must be 1 to {MAX_REPLICAS}")
    usable = {d: load for d, load in dirs.items() if load.usable}
    if rf > len(usable):
        raise ValueError(too_few_dirs(rf, len(usable), len(dirs) - len(usable)))
    replicas = {d: load.replicas for d, load in usable.items()}
    leaders = {d: load.leaders for d, load in usable.items()}
    plan: dict[int, list[int]] = {}
    for partition in partitions:
        order = sorted(usable, key=lambda d: (replicas[d], usable[d].bytes, d))
        chosen: list[int] = []
        devices: set[int] = set()
        for d in order:  # one per device while devices last
            if len(chosen) < rf and usable[d].device not in devices:
                chosen.append(d)
                devices.add(usable[d].device)
        for d in order:  # then the least loaded of the rest
            if len(chosen) < rf and d not in chosen:
                chosen.append(d)
        leader = min(chosen, key=lambda d: (leaders[d], chosen.index(d)))
        chosen.remove(leader)
        chosen.insert(0, leader)
        for d in chosen:
            replicas[d] += 1
        leaders[leader] += 1
        plan[partition] = chosen
    return plan
