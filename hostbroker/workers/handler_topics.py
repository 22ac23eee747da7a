"""Topic administration of the request handler (part of ``hb-handler-N``).

CREATE_TOPIC, DELETE_TOPIC and auto-creation on produce, mixed into
:class:`~hostbroker.workers.handler.HandlerWorker`. In cluster mode a plain
topic is never made under the name of one of the cluster's replicated topics
(the names ``hb-registrar`` publishes in ``shm/topicnames.py``): one place,
:meth:`TopicAdmin._plain_refused`, decides for both; until the registrar has
published its first view, both are refused retriably, and an auto-create
waits (LEADER_NOT_AVAILABLE) for a view read after it was first asked for
(so a produce from a client that knows of a replicated topic before this
broker does never makes a plain one of its name). Under the admin lock it
creates partition directories (via the log package) and their table slots, or
finds a topic's slots and asks their writers to delete them. A slot in use has
one writer only (its owning writer process, see ``shm/partitions.py``): the handler
never writes a slot a writer serves, so the writer marks it DELETING itself.

A topic with replicas across log dirs (a replication factor of 2 or more on
a standalone broker: CREATE_TOPIC v1, or ``default.replication.factor`` for
auto-creation and v1's -1) is ``hb-logdirs``' to create and delete; the
handler checks the request, then forwards it (``handler_logdirs.py``). An
auto-created one is asked for and the produce answered LEADER_NOT_AVAILABLE
(retriable) until it exists; that answer is given again for a second without
the admin lock, so a produce naming the new topic many times looks once.
CREATE_TOPIC v0 creates one replica, as before.
"""

from __future__ import annotations

import contextlib
import time

from hostbroker.errors import ConfigError, ErrorCode, HostbrokerError, InvalidTopicError
from hostbroker.log.partition import PartitionLog
from hostbroker.log.segments import validate_topic_name
from hostbroker.protocol import api
from hostbroker.protocol.api import ApiKey
from hostbroker.protocol.logdirs import DEFAULT_REPLICATION_FACTOR
from hostbroker.shm import partitions as ptable
from hostbroker.shm.topicnames import ReplicatedNames
from hostbroker.workers import envelopes as env
from hostbroker.workers.base import now_ms


RESERVED_PREFIX = "__"
# auto-creates waiting for a read of ZooKeeper's topics, remembered per handler
_FRESH_ASKS_MAX = 4096


def check_topic_name(topic: str) -> None:
    """InvalidTopicError unless ``topic`` is a name a client may create: valid
    for the log (:func:`validate_topic_name`) and not reserved for the broker."""
    validate_topic_name(topic)
    if topic.startswith(RESERVED_PREFIX):
        raise InvalidTopicError(
            f"topic names starting with {RESERVED_PREFIX} are reserved for the broker")


def admin_answer(code: ErrorCode, message: str | None = None) -> api.AdminResponse:
    """An admin answer whose message (which may echo the request) always fits."""
    return api.AdminResponse(code, api.clip_text(message))


class TopicAdmin:
    """Mixin of :class:`HandlerWorker`: topic creation and deletion."""

    # -- topics ------------------------------------------------------------
    def _init_topic_names(self) -> None:
        """The replicated topic names the registrar publishes (cluster mode only)."""
        self.replicated_names: ReplicatedNames | None = None
        self.registrar_bell = None
        # topic -> when an auto-create of it was first asked here (monotonic ns)
        self.fresh_asks: dict[str, int] = {}
        if self.config["zookeeper.connect"].strip():
            # (writable for its one word the handlers write: ``want_fresh``)
            self.replicated_names = ReplicatedNames.attach(self.plan.replicated_names_name)
            self.registrar_bell = self.plan.doorbell("registrar", 0)

    def _plain_refused(self, topic: str, fresh: bool = False) -> tuple[ErrorCode, str] | None:
        """Why a plain topic named ``topic`` may not be created here (None: it
        may): in cluster mode, a name the cluster holds as a replicated topic
        (a broker without a replica of it never makes a plain one), or any name
        before the registrar has read ZooKeeper's topics (retriable). With
        ``fresh`` (an auto-create), the view must also have been read from
        ZooKeeper after the name was first asked for here (LEADER_NOT_AVAILABLE
        until then, the registrar asked to read): a client that learnt of a
        replicated topic from its state node or another broker may come before
        this broker's watch of ``/brokers/topics`` has fired."""
        names = self.replicated_names
        if names is None:
            return None
        as_of = names.as_of_ns  # before the view: the view is that read's or newer
        replicated = names.replicated(topic)
        if replicated is None:
            return (ErrorCode.BROKER_NOT_AVAILABLE,
                    "the broker has not read the cluster's topics from ZooKeeper yet; "
                    "try again")
        if replicated:
            return (ErrorCode.TOPIC_ALREADY_EXISTS,
                    f"topic {topic} is a replicated topic of the cluster (or the broker "
                    "cannot tell it is not); this broker holds no replica of it")
        if fresh:
            asks = self.fresh_asks
            asked = asks.get(topic)
            if asked is None:
                if len(asks) >= _FRESH_ASKS_MAX:
                    # the oldest ask goes (forgotten, it costs its client one more try)
                    del asks[next(iter(asks))]
                asked = asks[topic] = time.monotonic_ns()
            if as_of < asked:
                names.want_fresh(asked)
                self.registrar_bell.ring()
                return (ErrorCode.LEADER_NOT_AVAILABLE,
                        f"the broker is reading the cluster's topics from ZooKeeper before "
                        f"it creates topic {topic}; try again")
            del asks[topic]
        return None

    @contextlib.contextmanager
    def _admin(self):
        """The admin lock, or BROKER_NOT_AVAILABLE when another process holds it too long."""
        try:
            self.lock.acquire()
        except TimeoutError as e:
            raise HostbrokerError(f"topic admin busy: {e}", ErrorCode.BROKER_NOT_AVAILABLE) from e
        try:
            yield
        finally:
            self.lock.release()

    def _create_topic_locked(self, topic: str, partitions: int, overrides: dict[str, str],
                             first: int = 0, stamp: int = 0) -> None:
        """Create a topic's partitions ``first`` to ``partitions`` - 1 (of
        ``partitions``), each on the log dir holding the fewest. Caller holds
        the admin lock and has checked the topic does not exist (or, with
        ``first``, has those partitions, and ``stamp`` is the change their
        config is: ALTER_TOPIC, ``handler_alter.py``). A failure part-way
        (a disk, the table full) takes back the partitions it made."""
        counts = [0] * self.plan.num_writers
        # a damaged partition is OFFLINE alone; its log dir takes new ones
        offline = self.table.offline_log_dirs()
        for _, s in self.table.scan():
            counts[s.owner] += 1
        usable = [w for w in range(self.plan.num_writers) if w not in offline]
        if not usable:
            raise HostbrokerError("every log dir is offline", ErrorCode.STORAGE_ERROR)
        created = []
        try:
            for partition in range(first, partitions):
                w = min(usable, key=lambda i: (counts[i], i))
                slot = self.table.find_free()
                if slot is None:
                    raise HostbrokerError("partition table full: raise max.partitions",
                                          ErrorCode.INVALID_REQUEST)
                plog = PartitionLog.create(self.plan.log_dirs[w], topic, partition, partitions,
                                           overrides, self.defaults, now_ms, stamp=stamp)
                plog.close()
                self.table.write(slot, state=ptable.ONLINE, name=topic, partition=partition,
                                 owner=w, start_offset=0, end_offset=0, flushed_offset=0,
                                 segment_generation=1)
                created.append(slot)
                counts[w] += 1
        except OSError as e:
            for slot in created:
                self.table.write(slot, state=ptable.DELETING)
            raise HostbrokerError(f"cannot create partition: {e}", ErrorCode.STORAGE_ERROR) from e
        except HostbrokerError:
            for slot in created:
                self.table.write(slot, state=ptable.DELETING)
            raise
        finally:
            self.table.bump_generation()
            self.view.refresh()

    def _topic_exists_locked(self, topic: str) -> bool:
        return any(s.name == topic and s.state != ptable.FREE for _, s in self.table.scan())

    def _create_topic(self, p, conn_id, seq, corr, request) -> None:
        """CREATE_TOPIC v0 and v1: answered here, or by ``hb-logdirs`` for a
        replication factor of 2 or more."""
        rf = getattr(request, "replication_factor", 1)  # (v0 has none: one replica)
        if rf == DEFAULT_REPLICATION_FACTOR:
            rf = self.default_rf
        checked = self._create_checked(request, rf)
        if isinstance(checked, api.AdminResponse):
            self._reply(p, conn_id, seq, corr, checked)
            return
        self._create_replicated(p, conn_id, seq, corr, request.topic, request.partitions, rf,
                                checked, admin_answer)

    def _create_checked(self, request, rf: int) -> api.AdminResponse | dict[str, str]:
        """The answer to a CREATE_TOPIC made here (one replica) or refused, or
        the topic's config overrides when ``hb-logdirs`` is to create it."""
        topic = request.topic
        try:
            check_topic_name(topic)
        except InvalidTopicError as e:
            return admin_answer(ErrorCode.INVALID_TOPIC, str(e))
        limit = self.config["max.partitions.per.topic"]
        if not 1 <= request.partitions <= limit:
            return admin_answer(ErrorCode.INVALID_REQUEST,
                                f"partitions must be between 1 and {limit}")
        if not 1 <= rf <= ptable.MAX_REPLICAS:
            return admin_answer(ErrorCode.INVALID_REPLICATION_FACTOR,
                                f"the replication factor must be 1 to {ptable.MAX_REPLICAS}")
        if rf > 1 and self.replicated_names is not None:
            return admin_answer(ErrorCode.INVALID_REQUEST, "a cluster broker's replicated "
                                "topics are created with --zookeeper")
        overrides = {entry.key: entry.value for entry in request.configs}
        if len(overrides) != len(request.configs):
            return admin_answer(ErrorCode.INVALID_CONFIG, "a config key is given twice")
        try:
            cfg = self.defaults.with_overrides(overrides)
        except ConfigError as e:
            return admin_answer(ErrorCode.INVALID_CONFIG, str(e))
        if rf > 1 and cfg.min_insync_replicas > rf:
            return admin_answer(ErrorCode.INVALID_CONFIG,
                                f"min.insync.replicas {cfg.min_insync_replicas} is more than "
                                f"the replication factor {rf}")
        try:
            with self._admin():
                if self._topic_exists_locked(topic):
                    return admin_answer(ErrorCode.TOPIC_ALREADY_EXISTS,
                                        f"topic {topic} already exists")
                refused = self._plain_refused(topic)
                if refused:
                    return admin_answer(*refused)
                if rf > 1:
                    return overrides
                self._create_topic_locked(topic, request.partitions, overrides)
        except HostbrokerError as e:
            return admin_answer(e.code, str(e))
        return admin_answer(ErrorCode.NONE, None)

    def _auto_create(self, topic: str) -> ErrorCode:
        """Create the unknown ``topic`` a produce names (NONE once it exists),
        or the error that partition is answered with. With
        ``default.replication.factor`` 2 or more the topic stays unknown until
        ``hb-logdirs`` has made it, so every entry of a produce names it again:
        what the last look answered is given back for a while
        (:meth:`_auto_create_answered`) without the admin lock or a table scan."""
        try:
            check_topic_name(topic)
        except InvalidTopicError:
            return ErrorCode.INVALID_TOPIC
        if self.default_rf > 1:
            answered = self._auto_create_answered(topic)
            if answered is not None:
                return answered
        try:
            with self._admin():
                if not self._topic_exists_locked(topic):
                    refused = self._plain_refused(topic, fresh=True)
                    if refused:
                        # a client with stale metadata: it asks again and finds the
                        # leader; or (LEADER_NOT_AVAILABLE) ZooKeeper is being read
                        return (ErrorCode.LEADER_NOT_AVAILABLE
                                if refused[0] == ErrorCode.LEADER_NOT_AVAILABLE
                                else ErrorCode.NOT_LEADER_FOR_PARTITION)
                    if self.default_rf > 1:
                        return self._auto_create_replicated(topic)
                    self._create_topic_locked(topic, self.config["num.partitions"], {})
        except HostbrokerError as e:
            return e.code
        self.view.refresh()
        return ErrorCode.NONE

    def _delete_topic(self, p, conn_id, seq, corr, request) -> None:
        """Ask each partition's writer to delete it (the writer marks the slot
        DELETING, removes the dir and frees the slot, answering whatever it
        still had for it); answer once every writer has."""
        topic = request.topic
        try:
            with self._admin():
                slots = [(i, s) for i, s in self.table.scan()
                         if s.name == topic and s.state != ptable.FREE]
        except HostbrokerError as e:
            self._reply(p, conn_id, seq, corr, admin_answer(e.code, str(e)))
            return
        if not slots:
            self._reply(p, conn_id, seq, corr, admin_answer(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}"))
            return
        if self.logdirs_peer is not None and any(
                s.placement == ptable.PLACEMENT_LOG_DIRS for _, s in slots):
            def deleted(code: ErrorCode, message: str | None) -> api.AdminResponse:
                self._release_parked(topic)
                return admin_answer(code, message)

            self._delete_replicated(p, conn_id, seq, corr, topic, deleted)
            return

        def respond(pending, failed: bool = False) -> None:
            self._release_parked(topic)
            failures = [r for r in pending.results if r["error"]]
            errors = [r.get("message", "delete failed") for r in failures]
            if failed:
                errors.append("a writer restarted while deleting")
            # the first failure's code: STORAGE_ERROR, or BROKER_NOT_AVAILABLE (admin busy)
            code = (ErrorCode(failures[0]["error"]) if failures
                    else ErrorCode.STORAGE_ERROR if failed else ErrorCode.NONE)
            self._reply(pending.processor, pending.conn_id, pending.seq,
                        pending.correlation_id,
                        admin_answer(code, "; ".join(errors) if errors else None))

        pending = self._new_pending(p, conn_id, seq, corr, ApiKey.DELETE_TOPIC, [], respond)
        for i, s in slots:
            self._to_writer(pending, s.owner, *env.encode_json(
                env.OP_DELETE, pending.token,
                {"slot": i, "topic": s.name, "partition": s.partition}))

    def _release_parked(self, topic: str) -> None:
        """Answer the long polls on a deleted topic now (UNKNOWN_TOPIC_OR_PARTITION)."""
        self.view.refresh()
        waiting = []
        for x in self.parked:
            if any(part.topic == topic for part in x.request.partitions):
                self._answer_fetch(x.processor, x.conn_id, x.seq, x.correlation_id,
                                   x.request, force=True)
            else:
                waiting.append(x)
        self.parked = waiting
