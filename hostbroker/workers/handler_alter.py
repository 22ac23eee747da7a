"""Changing a topic on a running broker, reading its config overrides, and
naming the groups whose offsets it stores (part of ``hb-handler-N``):
ALTER_TOPIC (19), LIST_OFFSET_GROUPS (20) and DESCRIBE_TOPIC_CONFIGS (21),
docs/spec/protocol.md "Changing topics".

Mixed into :class:`~hostbroker.workers.handler.HandlerWorker`, after
:class:`~hostbroker.workers.handler_topics.TopicAdmin`, whose admin lock and
partition creation it uses.

ALTER_TOPIC of a topic of one replica per partition: the request is checked
whole first (keys, values, the partition count), then, under the admin
lock, against the topic (it exists, is not being deleted, is not a cluster's
replicated topic, every partition is online, does not shrink, a grow fits
the table's free slots, its overrides with the changes make a valid
config). With ``validate_only`` that is the answer. Else, still under the
lock, the topic's whole new override map (normalised) is decided on the
last one decided (the :data:`CHANGE_FILE` in partition 0's dir) with a
stamp newer than it, and recorded there; new partitions are created as
CREATE_TOPIC creates them, with the count and the config they had so far;
then every partition's writer is sent OP_ALTER_TOPIC with the map and the
stamp: it writes the partition's ``partition.json`` (count, config, stamp,
atomically) and applies the config to its open log, unless it holds a newer
stamp. So concurrent changes of a topic leave every partition with the last
one decided, and a change its handler never sent leaves them alike (the
same change run again completes it). Once every writer has answered, the
table's generation is bumped (or, the lock busy, owed and retried at every
loop turn), so that every handler reads the new config (its
:class:`~hostbroker.workers.topicview.TopicView` caches configs by
generation), and the client is answered. A topic whose replicas are placed
on log dirs is ``hb-logdirs``' to change: the request, checked here as far
as it can be without the topic, is forwarded (``logdirs/topic_changes.py``).

DESCRIBE_TOPIC_CONFIGS reads the lowest partition held of each topic,
kept per generation, at most :data:`MAX_CONFIG_READS` files a request.

LIST_OFFSET_GROUPS is ``hb-coordinator``'s: the op ``groups`` on its
offsets ring, with the groups asked for (none: all), answered with those its
offsets store holds and each one's topics, cut to what fits an answer; with
the authorizer filtering it, asked in pages and cut after the filter.

Every answer of the three, whether built here at once, once the writers,
``hb-logdirs`` or ``hb-coordinator`` answered, or because one of them was
replaced first, goes out through the handler's ``_reply``, which counts one
with a top-level or any topic's error code in the API stats
(``stats_record``; tests/metrics/test_admin_errors.py holds it on a scrape).
"""

from __future__ import annotations

import json
import os

from hostbroker.errors import ConfigError, ErrorCode, HostbrokerError
from hostbroker.log.config import TOPIC_CONFIG_KEYS
from hostbroker.log.files import read_file, write_file_atomically
from hostbroker.log.partition_file import read_partition_counters
from hostbroker.protocol import api
from hostbroker.protocol import topics_admin as ta
from hostbroker.protocol.api import ApiKey
from hostbroker.shm import partitions as ptable
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms
from hostbroker.workers.handler_topics import admin_answer

# bytes of a LIST_OFFSET_GROUPS answer around its names: size, correlation id,
# error code, count, truncated
_GROUPS_OVERHEAD = 4 + 4 + 2 + 4 + 1

# The topic's last change decided under the admin lock, in its partition 0's
# dir: {"stamp", "config", "partitions"}. Written by the handler that decided
# it (under the lock), read by the next ALTER_TOPIC of the topic as its base,
# so a change decided while another's writers are still applying builds on it.
CHANGE_FILE = "topic-change.json"
_MAX_CHANGE_FILE_BYTES = 4096  # seven keys of short normalised values

# DESCRIBE_TOPIC_CONFIGS: partition files one request may read that the
# handler has not read since the table's generation last moved; the topics
# past it are answered BROKER_NOT_AVAILABLE (retriable), docs/spec/protocol.md
MAX_CONFIG_READS = 500


class _Change:
    """A checked ALTER_TOPIC: what every partition's writer is sent."""

    __slots__ = ("topic", "partitions", "overrides", "stamp", "slots")

    def __init__(self, topic: str, partitions: int | None, overrides: dict[str, str],
                 stamp: int, slots: list):
        self.topic, self.partitions = topic, partitions
        self.overrides, self.stamp = overrides, stamp  # the whole new map, normalised
        self.slots = slots  # (slot, record) of every partition, new ones included


def read_change(path: str) -> tuple[int, dict[str, str]] | None:
    """The ``(stamp, config)`` of a partition dir's :data:`CHANGE_FILE`, None
    when there is none or it is not one (hostile input: bounded, no link)."""
    try:
        doc = json.loads(read_file(os.path.join(path, CHANGE_FILE), _MAX_CHANGE_FILE_BYTES))
    except (OSError, ValueError, RecursionError):  # (none yet, or not one)
        return None
    if not isinstance(doc, dict):
        return None
    stamp, config = doc.get("stamp"), doc.get("config")
    if type(stamp) is not int or not 0 < stamp < 2**63 or not isinstance(config, dict) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
        return None
    return stamp, config


def _changes_checked(request) -> tuple[dict[str, str], list[str]] | api.AdminResponse:
    """The request's config changes, checked without the topic: ``(set, delete)``,
    or the answer refusing them."""
    sets: dict[str, str] = {}
    for entry in request.set_configs:
        if entry.key in sets:
            return admin_answer(ErrorCode.INVALID_CONFIG, f"{entry.key}: set twice")
        sets[entry.key] = entry.value
    deletes = list(dict.fromkeys(request.delete_configs))
    if len(deletes) != len(request.delete_configs):
        return admin_answer(ErrorCode.INVALID_CONFIG, "a config key is deleted twice")
    for key in deletes:
        if key not in TOPIC_CONFIG_KEYS:
            return admin_answer(ErrorCode.INVALID_CONFIG, f"{key}: unknown topic config key")
        if key in sets:
            return admin_answer(ErrorCode.INVALID_CONFIG, f"{key}: both set and deleted")
    return sets, deletes


def _within(groups: list, max_bytes: int) -> tuple[list, bool]:
    """As many of ``groups`` (``(group, [topic, ...])``) as fit ``max_bytes``
    on the wire (the last perhaps cut to its first topics), as the
    coordinator cuts them, and whether any were cut."""
    kept, size = [], 0
    for group, topics in groups:
        size += 2 + len(group.encode("utf-8", "replace")) + 4
        if size > max_bytes:
            return kept, True
        shown = []
        kept.append((group, shown))
        for topic in topics:
            size += 2 + len(topic.encode("utf-8", "replace"))
            if size > max_bytes:
                return kept, True
            shown.append(topic)
    return kept, False


class TopicAlter:
    """Mixin of :class:`HandlerWorker`: ALTER_TOPIC and LIST_OFFSET_GROUPS."""

    def _topics_admin_request(self, p, conn_id, seq, corr, key, request) -> None:
        if key == ApiKey.ALTER_TOPIC:
            self._alter_topic(p, conn_id, seq, corr, request)
        elif key == ApiKey.DESCRIBE_TOPIC_CONFIGS:
            # of every topic: those it may describe (handler_access), chosen
            # before any file is read
            describe = None if request.topics else self._describes(p, conn_id)
            self._reply(p, conn_id, seq, corr, self._topic_configs(request.topics, describe))
        else:
            self._list_offset_groups(p, conn_id, seq, corr, request)

    # -- DESCRIBE_TOPIC_CONFIGS --------------------------------------------------
    def _topic_configs(self, topics, describe=None) -> ta.DescribeTopicConfigsResponse:
        """Each topic's overrides, read from the ``partition.json`` of the
        lowest partition of it this broker holds (every partition of a topic
        ends with the same: each ALTER_TOPIC sends every one its whole map).
        What was read is kept until the table's generation moves; one request
        reads at most :data:`MAX_CONFIG_READS` files, the topics past that are
        BROKER_NOT_AVAILABLE (asked again, they are read)."""
        self.view.refresh()
        cache = getattr(self, "_configs_read", None)
        if cache is None or cache[0] != self.view.generation:
            # read again once a topic is created, deleted or changed (ALTER_TOPIC
            # bumps the table's generation after its writers have answered)
            cache = self._configs_read = (self.view.generation, {})
        names = list(dict.fromkeys(topics)) if topics else sorted(self.view.topics)
        if describe is not None:
            names = [n for n in names if describe(n)]
        out = []
        reads = 0
        for topic in names:
            # the lowest partition held (a cluster broker may hold no partition 0)
            slot = next((x for x in (self.view.slot(topic, i) for i in range(
                len(self.view.topics.get(topic) or ()))) if x is not None), None)
            if slot is None:
                out.append(ta.TopicConfigs(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            found = cache[1].get(topic)
            if found is None and reads >= MAX_CONFIG_READS:
                found = ta.TopicConfigs(topic, ErrorCode.BROKER_NOT_AVAILABLE)  # (not kept)
            elif found is None:
                reads += 1
                try:
                    overrides = read_partition_counters(
                        self.view.partition_path(self.table.read(slot)))[3]
                    found = ta.TopicConfigs(topic, ErrorCode.NONE, tuple(
                        api.TopicConfigEntry(k, str(v)) for k, v in sorted(overrides.items())))
                    cache[1][topic] = found
                except (OSError, ValueError, HostbrokerError):
                    found = ta.TopicConfigs(topic, ErrorCode.STORAGE_ERROR)  # (not kept)
            out.append(found)
        return ta.DescribeTopicConfigsResponse(tuple(out))

    # -- LIST_OFFSET_GROUPS ----------------------------------------------------
    def _list_offset_groups(self, p, conn_id, seq, corr, request) -> None:
        # what an answer may hold, and what one ring message can carry as json
        # (a name's character takes at most 12 bytes there, 4 on the wire, and
        # its quotes, brackets and commas at most twice its length fields' bytes)
        carried = self.config["ring.bytes"] // 16
        max_bytes = min(self.max_response_bytes - _GROUPS_OVERHEAD, carried)
        # of every group: those it may describe; of each group's topics, those
        # it may describe (handler_access.py). Filtered, the coordinator is
        # asked in pages of what a ring message carries, each after the last
        # group of the one before, until the filtered groups fill the answer
        # or the store has no more: the cut is made here, after the filter,
        # so it is over what the principal may see.
        shown = None if request.groups else self._groups_shown(p, conn_id)
        describe = self._describes(p, conn_id)
        filtering = shown is not None or describe is not None
        asked = list(dict.fromkeys(request.groups))
        found: list = []  # the filtered groups of the pages so far
        partial = False  # a page's only group was cut, or one passed over whole
        pages = 0  # asked of the coordinator so far (at most offsets.list.max.pages)
        max_pages = self.config["offsets.list.max.pages"]

        def respond(pending, failed: bool = False) -> None:
            nonlocal partial
            result = None if failed or not pending.results else pending.results[0]
            if result is None:
                body = ta.ListOffsetGroupsResponse(ErrorCode.BROKER_NOT_AVAILABLE)
            else:
                code = ErrorCode(result.get("error", 0))
                page = [(str(g), [str(t) for t in topics]) for g, topics in
                        result.get("groups") or ()]
                found.extend((g, [t for t in topics if describe is None or describe(t)])
                             for g, topics in page if shown is None or shown(g))
                # a group whose name alone passes a page is passed over (said in the flag)
                skip = result.get("skip")
                partial = partial or bool(result.get("partial")) or skip is not None
                groups, cut = _within(found, max_bytes)
                truncated = bool(result.get("truncated"))
                after = page[-1][0] if page else skip
                if filtering and code == ErrorCode.NONE and truncated and not cut \
                        and after is not None and pages < max_pages:
                    ask(after)  # the next page
                    return
                # (filtered and truncated, the pages left unasked may hold more)
                body = ta.ListOffsetGroupsResponse(
                    code, tuple(ta.OffsetGroup(g, tuple(topics)) for g, topics in groups),
                    1 if cut or partial or truncated else 0)
            self._reply(pending.processor, pending.conn_id, pending.seq,
                        pending.correlation_id, body)

        def ask(after: str | None) -> None:
            nonlocal pages
            pages += 1
            pending = self._new_pending(p, conn_id, seq, corr, ApiKey.LIST_OFFSET_GROUPS, [],
                                        respond)
            op = {"op": "groups", "groups": asked, "max_bytes": max_bytes}
            if filtering:
                op.update(max_bytes=carried, after=after)
            self._to_writer(pending, self.coordinator,
                            *env.encode_json(env.OP_OFFSETS, pending.token, op))

        ask(None)

    # -- ALTER_TOPIC -----------------------------------------------------------
    def _alter_topic(self, p, conn_id, seq, corr, request) -> None:
        checked = self._alter_checked(request)
        if isinstance(checked, api.AdminResponse):
            self._reply(p, conn_id, seq, corr, checked)
            return
        if checked == "logdirs":
            self._alter_dirs_placed(p, conn_id, seq, corr, request)
            return
        change: _Change = checked

        def respond(pending, failed: bool = False) -> None:
            failures = [r for r in pending.results if r.get("error")]
            errors = [r.get("message") or "alter failed" for r in failures]
            if failed:
                errors.append("a writer restarted while the topic changed")
            code = (ErrorCode(failures[0]["error"]) if failures
                    else ErrorCode.STORAGE_ERROR if failed else ErrorCode.NONE)
            if code != ErrorCode.NONE:
                errors.append("the partitions named missed the change: run the same "
                              "change again to complete it")
            try:
                with self._admin():
                    # every handler's view reads the partitions' configs again
                    self.table.bump_generation()
            except HostbrokerError:
                self.bump_owed = True  # retried at every loop turn (_retry_owed_bump)
            self.view.refresh()
            self._reply(pending.processor, pending.conn_id, pending.seq,
                        pending.correlation_id,
                        admin_answer(code, "; ".join(errors) if errors else None))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.ALTER_TOPIC, [], respond)
        for slot, s in change.slots:
            self._to_writer(pending, s.owner, *env.encode_json(
                env.OP_ALTER_TOPIC, pending.token,
                {"slot": slot, "topic": s.name, "partition": s.partition,
                 "partitions": change.partitions, "config": change.overrides,
                 "stamp": change.stamp}))
        if pending.remaining == 0:
            del self.pending[pending.token]
            respond(pending)

    def _retry_owed_bump(self) -> None:
        """Bump the table's generation if a config change could not (the admin
        lock was busy then): tried once a loop turn, never waiting, until it
        succeeds, so that every handler reads the changed config soon."""
        if not getattr(self, "bump_owed", False):
            return
        try:
            self.lock.acquire(timeout=0)
        except TimeoutError:
            return
        try:
            self.table.bump_generation()
            self.bump_owed = False
        finally:
            self.lock.release()

    def _alter_checked(self, request) -> _Change | api.AdminResponse | str:
        """What the ALTER_TOPIC ``request`` changes (its new partitions made
        already), the answer refusing it (or a ``validate_only`` one's), or
        "logdirs" for a topic ``hb-logdirs`` changes."""
        topic = request.topic
        if request.changes_nothing():
            return admin_answer(ErrorCode.INVALID_REQUEST,
                                f"nothing to change in topic {topic}: give partitions, "
                                "configs to set or configs to delete")
        checked = _changes_checked(request)
        if isinstance(checked, api.AdminResponse):
            return checked
        sets, deletes = checked
        try:
            # the values as the config reads them (short), never as sent
            sets = self.defaults.with_overrides(sets).overrides_of(sets)
        except ConfigError as e:
            return admin_answer(ErrorCode.INVALID_CONFIG, str(e))
        wanted = request.partitions
        limit = self.config["max.partitions.per.topic"]
        if wanted != ta.PARTITIONS_UNCHANGED and not 1 <= wanted <= limit:
            return admin_answer(ErrorCode.INVALID_PARTITIONS,
                                f"partitions must be between 1 and {limit} (or -1: unchanged), "
                                f"not {wanted}")
        try:
            with self._admin():
                return self._alter_locked(request, sets, deletes)
        except HostbrokerError as e:
            return admin_answer(e.code, str(e))

    def _alter_locked(self, request, sets: dict[str, str],
                      deletes: list[str]) -> _Change | api.AdminResponse | str:
        """The checks against the topic, and its new partitions; caller holds
        the admin lock. Everything that could stop the change part-way (a
        partition on an offline log dir, too few free slots) is refused
        before anything changes, ``validate_only`` or not. The topic's whole
        new override map is decided here, on the last one decided (the
        :data:`CHANGE_FILE`), with a stamp newer than it: every partition is
        sent both and keeps the newest stamp's map, whatever order changes
        reach it in."""
        topic, wanted = request.topic, request.partitions
        slots = [(i, s) for i, s in self.table.scan()
                 if s.name == topic and s.state != ptable.FREE]
        if not slots or any(s.state == ptable.DELETING for _, s in slots):
            names = getattr(self, "replicated_names", None)
            if not slots and names is not None and names.replicated(topic):
                return admin_answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    f"this broker holds no replica of topic {topic}, a "
                                    "replicated topic of the cluster: change it with "
                                    "hostbroker topics alter --zookeeper")
            return admin_answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
        if any(s.placement == ptable.PLACEMENT_LOG_DIRS for _, s in slots):
            return "logdirs"
        if any(s.role != ptable.ROLE_PLAIN for _, s in slots):
            return admin_answer(ErrorCode.INVALID_REQUEST,
                                f"topic {topic} is a replicated topic of the cluster: change it "
                                "with hostbroker topics alter --zookeeper")
        slots.sort(key=lambda x: x[1].partition)
        offline = self.table.offline_log_dirs()
        down = [s for _, s in slots if s.state == ptable.OFFLINE or s.owner in offline]
        if down:
            return admin_answer(ErrorCode.STORAGE_ERROR,
                                f"partition {topic}-{down[0].partition} is offline (log dir "
                                f"{self.plan.log_dirs[down[0].owner]}); nothing changed")
        count = slots[-1][1].partition + 1
        if wanted != ta.PARTITIONS_UNCHANGED and wanted < count:
            return admin_answer(ErrorCode.INVALID_PARTITIONS,
                                f"topic {topic} has {count} partitions; partitions only grow "
                                f"(asked for {wanted})")
        first = self.view.partition_path(slots[0][1])
        try:
            current, stamp = [read_partition_counters(first)[i] for i in (3, 6)]
        except (OSError, ValueError, HostbrokerError) as e:
            return admin_answer(ErrorCode.STORAGE_ERROR,
                                f"cannot read the config of {topic}-{slots[0][1].partition}: {e}")
        decided = read_change(first)
        if decided is not None and decided[0] >= stamp:
            stamp, current = decided  # (its writers may not all have it yet)
        overrides = {k: v for k, v in current.items() if k not in deletes}
        overrides.update(sets)
        try:
            overrides = self.defaults.with_overrides(overrides).overrides_of(overrides)
        except ConfigError as e:
            return admin_answer(ErrorCode.INVALID_CONFIG, str(e))
        grow = wanted != ta.PARTITIONS_UNCHANGED and wanted > count
        if grow:
            free = self.table.slot_count - len(self.table.scan())
            if free < wanted - count:
                return admin_answer(ErrorCode.INVALID_REQUEST,
                                    f"partition table full: {wanted - count} partitions to "
                                    f"make, {free} slots free (raise max.partitions); "
                                    "nothing changed")
            if len(offline) >= self.plan.num_writers:
                return admin_answer(ErrorCode.STORAGE_ERROR,
                                    "every log dir is offline; nothing changed")
        if request.validate_only:
            return admin_answer(ErrorCode.NONE, None)
        new_stamp = max(now_ms(), stamp + 1)
        try:
            write_file_atomically(os.path.join(first, CHANGE_FILE), json.dumps(
                {"stamp": new_stamp, "config": overrides,
                 "partitions": wanted if grow else count}, sort_keys=True).encode())
        except OSError as e:
            return admin_answer(ErrorCode.STORAGE_ERROR,
                                f"cannot record the change of {topic}: {e}; nothing changed")
        if grow:
            # made as the partitions are now (the last change decided): the change
            # itself reaches them as it reaches the others, so a handler gone
            # before sending it leaves every partition alike
            self._create_topic_locked(topic, wanted, current, first=count, stamp=stamp)
            slots = sorted(((i, s) for i, s in self.table.scan()
                            if s.name == topic and s.state != ptable.FREE),
                           key=lambda x: x[1].partition)
        return _Change(topic, wanted if grow else None, overrides, new_stamp, slots)

    def _alter_dirs_placed(self, p, conn_id, seq, corr, request) -> None:
        """ALTER_TOPIC of a topic whose replicas are placed on log dirs: its
        config and partitions are ``hb-logdirs``' (``logdirs/topic_changes.py``)."""
        if self.logdirs_peer is None:
            self._reply(p, conn_id, seq, corr, admin_answer(
                ErrorCode.INVALID_REQUEST, self._no_logdirs()))
            return
        sets = {e.key: e.value for e in request.set_configs}
        doc = {"op": "alter_topic", "topic": request.topic, "partitions": request.partitions,
               "set": sets, "delete": list(request.delete_configs),
               "validate_only": bool(request.validate_only)}
        self._to_logdirs(p, conn_id, seq, corr, ApiKey.ALTER_TOPIC, doc,
                         lambda code, message, _results: admin_answer(code, message or None))
