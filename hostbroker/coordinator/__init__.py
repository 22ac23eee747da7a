"""The standalone broker's consumer group coordinator (docs/spec/groups.md).

``state`` holds the pure group state machine: groups, members, generations
and the range assignment, driven by an injected clock and returning what to
answer. It owns no socket and no process; the broker process that hosts it
feeds it requests and answers the parked joins it completes.
"""

from hostbroker.coordinator.state import (
    Coordinator,
    GroupPhase,
    JoinAnswer,
    Limits,
    Pending,
    SyncAnswer,
)

__all__ = ["Coordinator", "GroupPhase", "JoinAnswer", "Limits", "Pending", "SyncAnswer"]
