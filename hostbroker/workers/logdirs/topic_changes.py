"""hb-logdirs' topic changes: ALTER_TOPIC of a topic whose replicas are placed
on log dirs (the OP_LOCAL_ADMIN op ``alter_topic``, forwarded by a handler).

Mixin of :class:`~hostbroker.workers.logdirs.worker.LogDirsWorker` (through
:class:`~hostbroker.workers.logdirs.admin.Admin`, after
:class:`~hostbroker.workers.logdirs.creation.Creations`).

The topic's config is the document's: the change is written there (durable
on every online dir) before anything applies, and answered then. Each
replica is sent the config with its state (``replicas.py``: a replica is
sent its state again whenever the topic's config differs from what it was
last sent, a replica on a dir that comes back included); its writer writes
it into the replica's ``partition.json`` and applies it to the open log.
New partitions are a creation (``creation.py``) of the partitions past the
old count, placed as CREATE_TOPIC version 1 places them, with the replication
factor of the topic's first partition; the new config is written into the
document with them, once every replica is made, and the answer follows.
"""

from __future__ import annotations

import time

from hostbroker.errors import ErrorCode, HostbrokerError
from hostbroker.workers.logdirs.creation import _Creation, answer


class TopicChanges:
    """Mixin: the ``alter_topic`` admin op (see the module docstring)."""

    def _alter_topic(self, h: int, token: int, request: dict) -> dict | None:
        """The answer, or None when new partitions are made over several rounds."""
        from hostbroker.replication.dirplacement import place_replicas

        topic = str(request["topic"])
        if topic not in self.doc.configs or topic in self.doc.deleting:
            return answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
        if topic in self.creating:
            return answer(ErrorCode.BROKER_NOT_AVAILABLE,
                          f"topic {topic} is being changed; try again")
        old = self.doc.configs[topic]
        deletes = {str(k) for k in request.get("delete") or ()}
        merged = {k: v for k, v in old.items() if k not in deletes}
        merged.update({str(k): str(v) for k, v in (request.get("set") or {}).items()})
        try:
            log_config = self.defaults.with_overrides(merged)
        except HostbrokerError as e:
            return answer(ErrorCode.INVALID_CONFIG, str(e))
        config = log_config.overrides_of(merged)  # as the broker reads them
        parts = self.doc.topic_parts(topic)
        rf = min(len(part.replicas) for _, part in parts)
        if log_config.min_insync_replicas > rf:
            return answer(ErrorCode.INVALID_CONFIG,
                          f"min.insync.replicas {log_config.min_insync_replicas} is more than "
                          f"the replication factor {rf}")
        count = parts[-1][0] + 1
        wanted = int(request.get("partitions", -1))
        limit = self.config["max.partitions.per.topic"]
        if wanted != -1 and not count <= wanted <= limit:
            why = (f"topic {topic} has {count} partitions; partitions only grow "
                   f"(asked for {wanted})" if wanted < count else
                   f"partitions must be between 1 and {limit} (or -1: unchanged), not {wanted}")
            return answer(ErrorCode.INVALID_PARTITIONS, why)
        if wanted > count:
            # placed before a validate_only answer: it runs the checks the change runs
            rf = len(parts[0][1].replicas)
            live = self.live_dirs(time.monotonic())
            try:
                placed = place_replicas(self._loads(live), list(range(count, wanted)), rf)
            except ValueError as e:
                return answer(ErrorCode.INVALID_REPLICATION_FACTOR, str(e))
        if request.get("validate_only"):
            return answer(ErrorCode.NONE)
        if wanted > count:
            job = _Creation(topic, config, {p: self.new_part(r) for p, r in placed.items()},
                            h, token, old_config=old)
            job.checked = True  # (the topic is dir-placed: no plain one can share its name)
            problem = self._too_long(job)
            if problem:
                return answer(ErrorCode.INVALID_REQUEST, f"refused: {problem}")
            self.creating[topic] = job
            return self._create_step(job, time.monotonic() + self.create_round_s)
        if config == old:
            return answer(ErrorCode.NONE)
        self.doc.configs[topic] = config
        if not self.write_doc():
            self.doc.configs[topic] = old
            self.write_back()
            return self._not_written()
        return answer(ErrorCode.NONE)
