"""The cluster's ACLs and quotas, read from ZooKeeper and published to every
process of this broker (cluster mode; part of ``hb-registrar``).

:class:`ClusterAccess` reads the whole layout of
:mod:`hostbroker.cluster.acls_zk` (every ACL node and ``/config/users``,
through :mod:`hostbroker.cluster.acls_zk_store`: bounded, every node
hostile), encodes it as the one document of ACLs and quotas
(:func:`hostbroker.security.store.encode_published`) and publishes it into
the broker's access document (``plan.access_name``,
:mod:`hostbroker.shm.published`), where every processor and handler reads
it (:class:`hostbroker.workers.access.AccessView`). It reads:

- when a change notice comes (a kazoo ``ChildrenWatch`` on
  ``/kafka-acl-changes``, ``/kafka-acl-extended-changes`` and
  ``/config/changes``; the callback only notes and rings the doorbell, the
  registrar's loop reads: ``registrar_watch.py``'s round);
- every ``POLL_S`` the notices are listed, and a change in them (a watch
  lost) is read as a notice; every ``FULL_S`` the whole layout is read
  again anyway (a node written without a notice).

A notice's value is not trusted nor needed: any notice means "read again".
Failing closed: an ACL node that is not one (not JSON, another version, an
entry that is not a binding, too long, too many children or bindings) is
said in one line, once until it changes, and the published document allows
the super users only (``aclsRefused``) until it is mended; a bad quota node
is left out (that user unbounded), reported. Until the first read the
document is the supervisor's "not read from ZooKeeper yet" (super users
only); a read that fails (ZooKeeper down, slow) publishes nothing, so the
last document read stays. The same document is never published twice (a
new generation empties every process's decision cache).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from hostbroker.cluster import acls_zk as layout
from hostbroker.cluster import zkread
from hostbroker.cluster.acls_zk_store import AclLayoutError, read_acls, read_quotas
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import encode_published
from hostbroker.shm.published import PublishedDocument, TornDocumentError
from hostbroker.workers.registrar_watch import WatchedReader

FULL_S = 30.0  # the whole layout read again this often even without a notice
_READ_MAX_S = 10.0  # one whole read waits at most this long
NOTICE_ROOTS = (layout.LITERAL_CHANGES, layout.PREFIXED_CHANGES, layout.CONFIG_CHANGES)


def _say(line: str) -> None:
    print(f"hostbroker: {line}", file=sys.stderr, flush=True)


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
        self.refused: str | None = None  # what was said of the ACLs read last
        self.notices: tuple | None = None  # the notices seen at the last whole read
        self.by_notice = True  # a watch fired since the last whole read
        self.next_full = 0.0
        self.reads = 0  # whole reads made (for tests and counters)

    def watch(self, client, on_change) -> None:
        for root in NOTICE_ROOTS:
            client.ensure_path(root)
            client.ChildrenWatch(root, on_change, send_event=False)

    def wanted(self, now: float) -> bool:
        if self.due:
            self.by_notice = True
        return super().wanted(now)

    def _notices(self, client) -> tuple:
        """What the notices are now: per root, how many and the newest."""
        from kazoo.exceptions import NoNodeError

        seen = []
        results = [client.get_children_async(root) for root in NOTICE_ROOTS]
        deadline = self.clock() + self.timeout_s
        for result in results:
            try:
                names = result.get(timeout=max(0.0, deadline - self.clock()))
            except NoNodeError:
                names = []
            seen.append((len(names), max(names, default="")))
        return tuple(seen)

    def read(self, client, now: float) -> None:
        notices = self._notices(client)
        if not self.by_notice and notices == self.notices and now < self.next_full:
            return
        self.read_and_publish(client)
        self.by_notice = False
        self.notices = notices
        self.next_full = now + FULL_S

    def read_and_publish(self, client) -> bytes:
        """Read the whole layout and publish it (when it differs from the last);
        the document. ZooKeeper errors are raised (nothing published)."""
        try:
            bindings = read_acls(client, bounds=self.bounds, max_bindings=self.max_bindings,
                                 timeout_s=self.timeout_s)
            refused = None
        except AclLayoutError as exc:
            bindings, refused = [], str(exc)
        quotas = read_quotas(client, bounds=self.bounds, max_entities=self.max_entities,
                             report=self.report, timeout_s=self.timeout_s)
        self.reads += 1
        data = encode_published(bindings, quotas, refused)
        if len(data) > self.document.capacity:
            refused = (f"the ACLs and quotas in ZooKeeper take {len(data)} bytes, more than "
                       f"acl.max.bytes ({self.document.capacity})")
            data = encode_published([], QuotaSet(), refused)
        self._tell(refused)
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
