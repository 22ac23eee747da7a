"""The cluster's ACLs and quotas, read from ZooKeeper and published to every
process of this broker (cluster mode; part of ``hb-registrar``).

:class:`ClusterAccess` keeps a copy of the layout of
:mod:`hostbroker.cluster.acls_zk` (every ACL node and every node of
``/config/users``, read through :mod:`hostbroker.cluster.acls_zk_store`:
bounded, every node hostile), and publishes it, encoded as the one document
of ACLs and quotas (:func:`hostbroker.security.store.encode_published`),
into the broker's access document (``plan.access_name``,
:mod:`hostbroker.shm.published`), where every processor and handler reads
it (:class:`hostbroker.workers.access.AccessView`).

It looks (``registrar_watch.py``'s round: the kazoo watches only note and
ring the doorbell, the registrar's loop reads) when a change notice comes (a
``ChildrenWatch`` on ``/kafka-acl-changes``, ``/kafka-acl-extended-changes``
and ``/config/changes``) and every ``POLL_S`` in case a watch was lost. A
look lists the notices, the six nodes whose children are ACL nodes and
``/config/users``: a node new to the list is read, one gone is dropped, and
each new notice names a node to read again (Kafka's notices: what they name
is only a hint of what to read, never taken as a value). When notices may
have come and gone unseen (ZooKeeper counts every child created or deleted
of a node, its ``cversion``; the controller removes ``/config/changes`` ones
at once, writers remove old ones), or too many came at once, every node is
read again; and every ``FULL_S`` anyway (a node rewritten without a
notice). Reading again goes ``CHUNK`` nodes a round of the loop, so a
hundred thousand ACLs never hold the loop (the controller, the
registration) for long; a node new to the list is read before anything is
published, and the first read, before the registrar says it is ready, reads
every node at once.

Failing closed: an ACL node that is not one (not JSON, another version, an
entry that is not a binding, too long; a resource name that is not one; too
many resources or bindings; a document longer than ``acl.max.bytes``) is
said in one line, once until it changes, and the published document allows
the super users only (``aclsRefused``) until it is mended; a bad quota node
is left out (that user unbounded), with a rate-limited warning. Until the
first read the document is the supervisor's "not read from ZooKeeper yet"
(super users only); a read that fails (ZooKeeper down, slow) publishes
nothing, so the last document read stays. The same document is never
published twice (a new generation empties every process's decision cache).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from hostbroker.cluster import acls_zk as layout
from hostbroker.cluster import zkread
from hostbroker.cluster.acls_zk_store import (
    list_acl_nodes,
    list_quota_nodes,
    read_acl_nodes,
    read_quota_nodes,
)
from hostbroker.security.acl import AclBinding
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import encode_published
from hostbroker.shm.published import PublishedDocument, TornDocumentError
from hostbroker.workers.registrar_watch import WatchedReader

FULL_S = 60.0  # every node read again this often (a node rewritten without a notice)
CHUNK = 2000  # most ACL nodes read again in one round of the loop
NOTICE_READ_MAX = 1000  # more new notices than this at once: every node read again
_READ_MAX_S = 10.0  # one read waits at most this long (and a little more a node)
ACL_NOTICES = (layout.LITERAL_CHANGES, layout.PREFIXED_CHANGES)
NOTICE_ROOTS = (*ACL_NOTICES, layout.CONFIG_CHANGES)


def _say(line: str) -> None:
    print(f"hostbroker: {line}", file=sys.stderr, flush=True)


class NoticeRoot:
    """What one look saw of a notice node: its children's names and its ``cversion``."""

    def __init__(self):
        self.seen: frozenset[str] = frozenset()
        self.cversion: int | None = None  # None: nothing seen (every node read again)

    def took(self, names: list[str] | None, cversion: int | None,
             bound: int) -> tuple[list[str], bool]:
        """The names new since the last look, and whether they are every change
        there was (``cversion`` moves with each child created or deleted: by
        more than the names come and gone, notices came and went unseen).
        ``names`` None: the node is missing (none there, as a node just made)."""
        if names is None:
            names, cversion = [], 0
        if cversion is None or len(names) > bound:
            self.seen, self.cversion = frozenset(), None
            return [], False
        now = frozenset(names)
        new, gone = now - self.seen, self.seen - now
        whole = self.cversion is not None and cversion - self.cversion == len(new) + len(gone)
        self.seen, self.cversion = now, cversion
        return sorted(new), whole


class ClusterAccess(WatchedReader):
    """Publishes the cluster's ACLs and quotas into ``document`` (module docstring).
    ``worker`` is the RegistrarWorker: its client, doorbell, ``connection_ms``
    and ``stopping``."""

    WHAT = "the ACLs and quotas"

    def __init__(self, worker, document: PublishedDocument, *, max_bindings: int,
                 max_entities: int, bounds: zkread.Bounds = zkread.DEFAULT,
                 clock=time.monotonic, say: Callable[[str], None] = _say):
        super().__init__(worker, bounds,
                         min(max(worker.connection_ms / 1000, 1.0), _READ_MAX_S), clock)
        self.document = document
        self.max_bindings, self.max_entities = max_bindings, max_entities
        self.say = say
        try:
            self.published: bytes | None = document.read()[1]
        except TornDocumentError:
            self.published = None
        self.ready = False  # a whole copy has been published by this reader
        self.refused: str | None = None  # what was said of the ACLs published last
        self.session = None  # the client the notices were seen on
        self.notices = {root: NoticeRoot() for root in NOTICE_ROOTS}
        self.listed: dict[str, dict[str, tuple]] = {}  # type node -> ACL node -> resource
        self.list_problems: dict[str, list[str]] = {}  # type node -> its bad children
        self.values: dict[str, list[AclBinding] | str] = {}  # ACL node -> bindings | problem
        self.urgent: set[str] = set()  # ACL nodes to read before publishing
        self.later: list[str] = []  # ACL nodes to read again, a chunk a round
        self.users: dict[str, str] = {}  # /config/users node -> entity
        self.quotas: dict[str, object] = {}  # /config/users node -> Quota | None
        self.users_due: set[str] = set()  # quota nodes to read
        self.by_notice = True  # a watch fired since the last look
        self.next_look = 0.0
        self.next_full = clock() + FULL_S
        self.nodes_read = 0  # ACL nodes read (for tests and counters)
        self.dirty = True  # the copy changed since it was last published

    # -- kazoo's threads -------------------------------------------------------------
    def watch(self, client, on_change) -> None:
        for root in NOTICE_ROOTS:
            client.ensure_path(root)
            client.ChildrenWatch(root, on_change, send_event=False)

    # -- the loop -----------------------------------------------------------------------
    def wanted(self, now: float) -> bool:
        if self.due:
            self.by_notice = True
        return super().wanted(now) or bool(self.urgent or self.later or self.users_due)

    def read(self, client, now: float) -> None:
        if client is not self.session:  # a new session: notices may have gone unseen
            self.session = client
            self.notices = {root: NoticeRoot() for root in NOTICE_ROOTS}
            self.by_notice = True
        if self.by_notice or now >= self.next_look:
            try:
                self.look(client)
            except Exception:
                # notices taken as seen may not have been read: read every node again
                self.notices = {root: NoticeRoot() for root in NOTICE_ROOTS}
                raise
            self.by_notice = False
            self.next_look = now + self.POLL_S
        if now >= self.next_full:
            self.again_all()
            self.next_full = now + FULL_S
        self.read_nodes(client)
        self.publish()

    def again_all(self) -> None:
        """Every node read again (the ACL nodes a chunk a round)."""
        self.again_all_acls()
        self.users_due |= set(self.users)

    def _get(self, result, deadline: float, missing):
        from kazoo.exceptions import NoNodeError

        try:
            return result.get(timeout=max(0.001, deadline - self.clock()))
        except NoNodeError:
            return missing

    def look(self, client) -> None:
        """List the notices, the ACL nodes and the quota nodes; note what to read."""
        deadline = self.clock() + self.timeout_s
        asked = {root: client.get_children_async(root, include_data=True)
                 for root in NOTICE_ROOTS}  # before the lists: a notice seen, its node listed
        kids = {root: client.get_children_async(root) for root, _, _ in layout.type_roots()}
        users = client.get_children_async(layout.USERS_ROOT)
        seen = {root: self._get(asked[root], deadline, (None, None)) for root in NOTICE_ROOTS}
        for root, pattern, resource_type in layout.type_roots():
            names = sorted(self._get(kids[root], deadline, []))
            nodes, problems = list_acl_nodes(root, pattern, resource_type, names,
                                             self.max_bindings)
            before = self.listed.get(root, {})
            for path in before.keys() - nodes.keys():
                self.values.pop(path, None)
                self.urgent.discard(path)
                self.dirty = True
            self.urgent |= nodes.keys() - before.keys()
            if problems != self.list_problems.get(root, []):
                self.dirty = True
            self.listed[root], self.list_problems[root] = nodes, problems
        user_nodes = list_quota_nodes(sorted(self._get(users, deadline, [])), self.max_entities,
                                      self.report)
        for node in self.users.keys() - user_nodes.keys():
            self.quotas.pop(node, None)
            self.users_due.discard(node)
            self.dirty = True
        self.users_due |= user_nodes.keys() - self.users.keys()
        self.users = user_nodes
        self._acl_notices(client, seen)
        self._quota_notices(client, seen[layout.CONFIG_CHANGES])

    def _new_notices(self, root: str, seen) -> list[str] | None:
        """The paths of the notices new under ``root``; None when some may have
        been missed or too many came (every node is read again)."""
        names, stat = seen
        new, whole = self.notices[root].took(names, getattr(stat, "cversion", None),
                                             self.bounds.children)
        if not whole or len(new) > NOTICE_READ_MAX:
            return None
        return [f"{root}/{name}" for name in new]

    def _notice_values(self, client, paths: list[str]) -> dict[str, bytes | None]:
        asked = [(path, client.get_async(path)) for path in paths]
        deadline = self.clock() + self.timeout_s
        return {path: self._get(result, deadline, (None, None))[0] for path, result in asked}

    def _acl_notices(self, client, seen) -> None:
        news = [self._new_notices(root, seen[root]) for root in ACL_NOTICES]
        if None in news:
            self.again_all_acls()
            return
        paths = [path for new in news for path in new]
        listed = {p for nodes in self.listed.values() for p in nodes}
        for path, data in self._notice_values(client, paths).items():
            if data is None:  # removed before it was read
                self.again_all_acls()
                return
            try:
                node = layout.decode_acl_change(data, path, self.bounds)
            except ValueError as exc:  # not a notice of ours: it may have named anything
                self.report(path, f"{exc}; every ACL node read again")
                self.again_all_acls()
                return
            if node in listed:  # (one not listed is gone, or past the bound)
                self.urgent.add(node)

    def again_all_acls(self) -> None:
        """Every ACL node read again: those a pass under way has yet to read first,
        then the others (a flood of reasons to start again never stops the pass)."""
        pending = set(self.later)
        listed = sorted(p for nodes in self.listed.values() for p in nodes)
        self.later += [p for p in listed if p not in pending and p not in self.urgent]

    def _quota_notices(self, client, seen) -> None:
        new = self._new_notices(layout.CONFIG_CHANGES, seen)
        if new is None:
            self.users_due |= set(self.users)
            return
        for path, data in self._notice_values(client, new).items():
            if data is None:  # the controller removed it first: it may have been a user's
                self.users_due |= set(self.users)
                return
            node = layout.decode_quota_change(data, path, self.bounds)
            if node in self.users:
                self.users_due.add(node)

    def read_nodes(self, client) -> None:
        """Read the ACL nodes due (every one before the first publish, else at most
        ``CHUNK``, new ones first) and the quota nodes due."""
        listed = {p: r for nodes in self.listed.values() for p, r in nodes.items()}
        self.later = [p for p in self.later if p in listed and p not in self.urgent]
        batch = sorted(self.urgent)
        if self.ready:
            batch = batch[:CHUNK]
            batch += self.later[:CHUNK - len(batch)]
        else:
            batch += self.later
        if batch:
            found = read_acl_nodes(client, {p: listed[p] for p in batch}, bounds=self.bounds,
                                   max_bindings=self.max_bindings, timeout_s=self.timeout_s)
            for path, value in found.items():
                if self.values.get(path) != value:
                    self.values[path] = value
                    self.dirty = True
            self.nodes_read += len(found)
            self.urgent -= found.keys()
            self.later = [p for p in self.later if p not in found]
        if self.users_due:
            due = sorted(self.users_due)
            found = read_quota_nodes(client, due, bounds=self.bounds, report=self.report,
                                     timeout_s=self.timeout_s)
            for node, quota in found.items():
                if node not in self.quotas or self.quotas[node] != quota:
                    self.quotas[node] = quota
                    self.dirty = True
            self.users_due -= set(due)

    def publish(self) -> bytes | None:
        """Publish the copy when it is whole and changed; the document published."""
        if self.urgent or self.users_due:
            return None
        if not self.dirty:
            return self.published
        problems = sorted(p for ps in self.list_problems.values() for p in ps)
        problems += sorted(v for v in self.values.values() if isinstance(v, str))
        bindings: set[AclBinding] = set()
        for value in self.values.values():
            if not isinstance(value, str):
                bindings.update(value)
        if not problems and len(bindings) > self.max_bindings:
            problems = [f"{layout.LITERAL_ROOT}: {len(bindings)} ACLs, more than "
                        f"acl.max.bindings ({self.max_bindings})"]
        refused = problems[0] if problems else None
        if refused is not None:
            bindings = set()
        quotas = QuotaSet({self.users[n]: q for n, q in self.quotas.items()
                           if q is not None and n in self.users})
        data = encode_published(bindings, quotas, refused)
        if len(data) > self.document.capacity:
            refused = (f"the ACLs and quotas in ZooKeeper take {len(data)} bytes, more than "
                       f"acl.max.bytes ({self.document.capacity})")
            data = encode_published([], QuotaSet(), refused)
        self._tell(refused)
        self.ready, self.dirty = True, False
        if data != self.published:
            self.document.publish(data)
            self.published = data
        return data

    def _tell(self, refused: str | None) -> None:
        """Say a refusal once (until it changes), and its end."""
        if refused == self.refused:
            return
        if refused is not None:
            self.say(f"hb-registrar: {refused}; allowing the super users only until it "
                     "is mended")
        else:
            self.say("hb-registrar: the ACLs in ZooKeeper are read again")
        self.refused = refused
