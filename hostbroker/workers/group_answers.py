"""What the coordinator is asked for an OFFSET_COMMIT, OFFSET_FETCH or
HEARTBEAT, and the answer built from what it says (pure: no rings, no
sockets).

Owns: the *op* of one such request, a dict that is both the request
``hb-coordinator`` serves (its ``op`` and the fields
:class:`~hostbroker.workers.coordinator.offsets.OffsetsHost` or
:class:`~hostbroker.workers.coordinator.groups.GroupHost` read) and all the
answer needs (each partition of the request in its order, and the code of
an entry refused before it got there), and :func:`answer`, the response of
an op from the coordinator's result, or from no result when the request
failed (the coordinator died with it).

Three processes use it: a handler, for the requests that come through it
(``handler_offsets.py``); a processor, for the ones it sends the coordinator
itself (``processor.direct.groups``, ``processor_groups.py``) and for the
answer of one whose coordinator died; and the coordinator, which answers
those (``coordinator/group_puts.py``).
"""

from __future__ import annotations

from typing import Any

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto


def commit_error(view, max_metadata_bytes: int, part) -> ErrorCode:
    """Why one OFFSET_COMMIT entry cannot be stored, or NONE (``view`` is a
    refreshed :class:`~hostbroker.workers.topicview.TopicView`)."""
    if view.slot(part.topic, part.partition) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    metadata = (part.metadata or "").encode("utf-8", "replace")
    if len(metadata) > max_metadata_bytes:
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.NONE


def commit_op(request, view, max_metadata_bytes: int) -> dict[str, Any]:
    """The op of an OFFSET_COMMIT (v0 or v1): the entries of existing partitions
    with metadata within ``max_metadata_bytes`` are stored, the others
    answered with their error. It goes to the coordinator even with nothing to
    store: the fence decides every entry's answer. A group name longer than
    the group requests take (``MAX_GROUP_ID_BYTES``: OFFSET_COMMIT v0 has no
    check of its own) has every entry refused INVALID_REQUEST."""
    if len(request.group.encode("utf-8", "surrogatepass")) > gproto.MAX_GROUP_ID_BYTES:
        codes = [ErrorCode.INVALID_REQUEST] * len(request.partitions)
    else:
        codes = [commit_error(view, max_metadata_bytes, part) for part in request.partitions]
    return {"op": "commit", "group": request.group,
            "fence": [getattr(request, "generation", gproto.NO_GENERATION),
                      getattr(request, "member_id", "")],
            "entries": [[request.group, part.topic, part.partition, part.offset, part.metadata]
                        for part, code in zip(request.partitions, codes)
                        if code == ErrorCode.NONE],
            "parts": [[part.topic, part.partition, int(code)]
                      for part, code in zip(request.partitions, codes)]}


def fetch_op(request) -> dict[str, Any]:
    """The op of an OFFSET_FETCH: each key once, however often the request
    repeats it."""
    keys = list(dict.fromkeys((request.group, part.topic, part.partition)
                              for part in request.partitions))
    return {"op": "fetch", "keys": [list(k) for k in keys], "group": request.group,
            "parts": [[part.topic, part.partition] for part in request.partitions]}


def heartbeat_op(request) -> dict[str, Any]:
    return {"op": "heartbeat", "group": request.group, "generation": request.generation,
            "member_id": request.member_id}


def answer(op: dict[str, Any], result: dict | None):
    """The response to ``op`` given the coordinator's ``result``; None for a
    request that failed (the coordinator died with it): every commit entry UNKNOWN but
    those refused before, every fetched offset -1 with UNKNOWN, a heartbeat
    BROKER_NOT_AVAILABLE (the member's client retries it)."""
    kind = op["op"]
    if kind == "commit":
        stored = ErrorCode.UNKNOWN if result is None else ErrorCode(result.get("error", 0))
        fenced = result is not None and result.get("fenced", False)
        return api.OffsetCommitResponse(tuple(
            api.OffsetCommitPartitionResult(topic, partition,
                                            stored if fenced else (ErrorCode(code) or stored))
            for topic, partition, code in op["parts"]))
    if kind == "fetch":
        code = ErrorCode.UNKNOWN if result is None else ErrorCode(result["error"])
        keys = op["keys"]
        offsets = (result or {}).get("offsets") or [[-1, ""]] * len(keys)
        found = {tuple(key): value for key, value in zip(keys, offsets)}
        group = op["group"]
        return api.OffsetFetchResponse(tuple(
            api.OffsetFetchPartitionResult(topic, partition, *found[(group, topic, partition)],
                                           code)
            for topic, partition in op["parts"]))
    if kind == "heartbeat":
        return gproto.HeartbeatResponse(ErrorCode.BROKER_NOT_AVAILABLE if result is None
                                        else ErrorCode(result["error"]))
    raise ValueError(f"no answer for op {kind!r}")
