"""The OFFSET_COMMITs, OFFSET_FETCHes and HEARTBEATs processors send the
coordinator themselves (GROUP_PUTs, ``processor.direct.groups``; part of
``hb-coordinator``).

Mixed into :class:`~hostbroker.workers.coordinator.worker.CoordinatorWorker`.
A GROUP_PUT comes on a processor's ``cput`` ring with its op
(:mod:`~hostbroker.workers.group_answers`) and where its answer goes. It is
served as the same op from a handler is
(:class:`~hostbroker.workers.coordinator.offsets.OffsetsHost`,
:class:`~hostbroker.workers.coordinator.groups.GroupHost`), in the order the
rings are read, and answered here, straight into the processor's ``cans``
ring: a heartbeat and a fetch with no commit ahead of it at once, a commit
when its sync returns. An answer over ``response.max.bytes`` is an error
frame after which the connection closes, as from a handler.
"""

from __future__ import annotations

import sys
import time
import traceback

from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol import groups as gproto
from hostbroker.shm import procs
from hostbroker.workers import envelopes as env
from hostbroker.workers import group_answers
from hostbroker.workers.stats_record import answer_has_error

_OP_KEYS = {"commit": api.ApiKey.OFFSET_COMMIT, "fetch": api.ApiKey.OFFSET_FETCH,
            "heartbeat": gproto.GroupApiKey.HEARTBEAT}  # the API stats' keys


class GroupPuts:
    """Mixin of :class:`CoordinatorWorker`: GROUP_PUTs (module docstring)."""

    def _group_put(self, m) -> None:
        direct, op = env.decode_group_put(m)
        kind = op.get("op")
        try:
            if kind == "heartbeat":
                result = self.groups.handle(None, None, op)
            elif kind in ("commit", "fetch"):
                # a commit is answered by _send_offsets when its sync returns
                result = self._offsets(None, (direct, op), op)
                if result is None:
                    return
            else:
                result = None
        except Exception:  # noqa: BLE001 - one request must never end the coordinator
            print(f"hostbroker: {self.name}: a {kind} from processor {direct.processor} failed "
                  "unexpectedly; answered UNKNOWN", file=sys.stderr, flush=True)
            traceback.print_exc()
            self.count(procs.ERRORS)
            result = None
        self._answer_group_put(direct, op, result)

    def _answer_group_put(self, direct: env.Direct, op: dict, result: dict | None) -> None:
        """Answer a GROUP_PUT from the coordinator's ``result`` (None: it failed)
        into its processor's answer ring; what the ring cannot take now waits
        in its sender (pumped by ``_pump``, in order)."""
        corr = direct.correlation_id
        try:
            response = group_answers.answer(op, result)
            frame, failed = api.encode_answer(corr, response, self.max_response_bytes)
            error = failed or answer_has_error(response)
        except Exception:  # noqa: BLE001 - an op no answer is built for
            frame, failed = api.encode_error_frame(corr, ErrorCode.UNKNOWN), True
            error = True
        if error:
            self.stats.error(_OP_KEYS.get(op.get("op"), -1))
        message = env.encode_response(direct.conn_id, direct.seq,
                                      env.RESP_CLOSE_AFTER if failed else 0, [frame],
                                      time.monotonic_ns())
        ring = self.answer_rings[direct.processor]
        if not ring.try_send(*message):
            ring.send(*message)
        self.processor_bells[direct.processor].wake()
        self.count(procs.REQUESTS)
