"""The standalone broker's consumer group coordinator (docs/spec/groups.md).

``model`` holds the data (groups, members, limits); ``state`` the pure group
state machine: groups, members, generations and the range assignment,
driven by an injected clock and returning what to answer; ``records`` turns
one group into a checked JSON-able record and back; ``store`` keeps those
records in the state file of a log dir, one appended record per changed
group, so a replacement of the process holding the state takes it over.
None of them owns a socket or a process; the broker process that hosts the
coordinator feeds it requests, answers the parked joins it completes and
hands the changed groups to the store.
"""

from hostbroker.coordinator.model import GroupPhase, Limits
from hostbroker.coordinator.state import (
    Coordinator,
    JoinAnswer,
    Pending,
    SyncAnswer,
)

__all__ = ["Coordinator", "GroupPhase", "JoinAnswer", "Limits", "Pending", "SyncAnswer"]
