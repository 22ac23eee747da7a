"""What a process that answers requests knows of access control: the
authorizer and the quotas of the document published now.

Owns: :class:`AccessView`, over the published document of ACLs and quotas
(:mod:`hostbroker.shm.published`, encoded by
:func:`hostbroker.security.store.encode_published`). :meth:`AccessView.authorizer`
gives the :class:`~hostbroker.security.authorizer.Authorizer` built from the
document of the current generation: one aligned load while the generation
holds; when it moves, the document is read again, and the authorizer is
rebuilt (with a fresh decision cache) only when the ACLs' stamp moved
(:func:`acls_stamp_of`: the bindings or ``refused``; a change of the quotas
alone keeps it). :meth:`AccessView.acls_stamp` is the stamp of the
authorizer in use (what :class:`KeptDecisions` and a fetch left at its writer
carry), and :class:`AclsStamps` the stamp of the document now for a process
without an authorizer (a writer). A document that
does not decode gives an authorizer that allows the super users only, said
once in the broker log; the next good document ends it. A document that does
not hold still (a writer publishing without pause; one killed mid-write
leaves the current document whole) is not taken as the generation's: the view keeps what it had and tries again at most every
:data:`TORN_RETRY_S`, and allows the super users only (said once) when no
read has succeeded for :data:`TORN_GRACE_S`, or when it had nothing yet; the
next read that succeeds ends it. With the authorizer off (``authorizer.enable`` false) there is
none: everything is allowed, and only the quotas are read.

:meth:`AccessView.snapshot` gives what was decoded for the current generation
(bindings, quotas, the line saying why the ACLs are refused), so the admin
requests' descriptions decode nothing of their own: one decode per
generation per process.

The broker's own user over the Unix socket (the uid this process runs as,
at :data:`~hostbroker.security.principals.UNIX_HOST`) is a super user
whatever ``super.users`` says: it can read the broker's files anyway, and
hb-http and the tools run as it reach the broker that way
(:meth:`AccessView.allows`, the one check every route makes).

Also owns the document's start: :func:`publish_at_start` (the supervisor,
before any fork: the standalone files, or in cluster mode nothing but the
super users until hb-registrar has read ZooKeeper) and :func:`open_access`
(a worker's view, from the plan and the settings).

Used by the processors and handlers (one view each).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterable

from hostbroker.security.acl import Operation, ResourceType
from hostbroker.security.authorizer import Authorizer, parse_super_users
from hostbroker.security.principals import UNIX_HOST, Identity, Principal, user_principal
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import (decode_published_snapshot, encode_published,
                                       load_published)
from hostbroker.shm.published import PublishedDocument, TornDocumentError
from hostbroker.shm.region import SharedRegion


TORN_RETRY_S = 0.1  # a document that did not hold still: read again no sooner
TORN_GRACE_S = 2.0  # ... and keep the last one read at most this long
FAILED_STAMP = -2  # the ACLs' stamp while no read has held still for TORN_GRACE_S


def acls_stamp_of(document: bytes) -> int:
    """The ACLs' stamp of a published document (0 to 2**63 - 1): a hash of its
    bytes but the quotas' (the strings and rows before ``"quotas"``, and the
    ``aclsRefused`` and ``aclsDigest`` after them; JSON escapes every quote
    inside a string, so neither key is found within one). The same bytes
    give the same stamp in every process; a change of the quotas alone leaves
    it, a change of the bindings or of ``refused`` moves it."""
    cut = document.find(b'],"quotas":')
    digest = hashlib.blake2b(digest_size=8)
    if cut < 0:
        digest.update(document)
    else:
        digest.update(document[:cut])
        tails = [i for i in (document.find(b',"aclsRefused":', cut),
                             document.find(b',"aclsDigest":', cut)) if i >= 0]
        if tails:
            digest.update(b"\0")
            digest.update(document[min(tails):])
    return int.from_bytes(digest.digest(), "little") >> 1


class AclsStamps:
    """The ACLs' stamp (:func:`acls_stamp_of`) of the document published now,
    for a process that holds no authorizer (a writer's polls): read again
    when the generation moves; a read that does not hold still keeps the
    stamp before and is tried again after :data:`TORN_RETRY_S`."""

    def __init__(self, document: PublishedDocument,
                 clock: Callable[[], float] = time.monotonic):
        self.document = document
        self.clock = clock
        self._generation = -1
        self._stamp = -1
        self._retry_at = 0.0

    def current(self) -> int:
        generation = self.document.generation
        if generation != self._generation:
            now = self.clock()
            if now >= self._retry_at:
                try:
                    generation, data = self.document.read()
                except TornDocumentError:
                    self._retry_at = now + TORN_RETRY_S
                    return self._stamp
                self._generation, self._stamp = generation, acls_stamp_of(data)
        return self._stamp


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What one generation of the document holds, decoded once. ``bindings``
    is None when the ACLs were refused where they are kept (``refused`` says
    why) or the document cannot be read (``failure`` says why); then
    ``quotas`` is empty."""

    generation: int
    bindings: tuple | None
    quotas: QuotaSet
    refused: str | None = None
    failure: str | None = None
    acls_digest: str | None = None  # the ACL file's it was published from


def _say(line: str) -> None:
    print(f"hostbroker: {line}", file=sys.stderr, flush=True)


class AccessView:
    """The authorizer and quotas of one process (module docstring)."""

    def __init__(self, document: PublishedDocument, *, enabled: bool,
                 super_users: Iterable[Principal] = (), allow_if_no_acl: bool = False,
                 max_bindings: int = 100_000, max_entities: int = 4096,
                 cache_entries: int = 100_000, say: Callable[[str], None] = _say,
                 clock: Callable[[], float] = time.monotonic):
        self.document = document
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.max_bindings, self.max_entities = max_bindings, max_entities
        self.cache_entries = cache_entries
        self.say = say
        self.own = user_principal(os.geteuid())
        self._generation = -1
        self._stamp = -1  # the ACLs' stamp of the document the authorizer was built from
        self._authorizer: Authorizer | None = None
        self._quotas = QuotaSet()
        self._failed = False
        self._snapshot = Snapshot(-1, None, QuotaSet(), failure="not read yet")
        self.clock = clock
        self._torn_since: float | None = None  # when reads began not to hold still
        self._retry_at = 0.0

    def _refresh(self) -> None:
        generation = self.document.generation
        if generation == self._generation:
            return
        now = self.clock()
        if self._torn_since is not None and now < self._retry_at:
            return
        try:
            generation, data = self.document.read()
        except TornDocumentError as exc:
            self._torn(now, exc)
            return
        self._torn_since = None
        stamp = acls_stamp_of(data)
        try:
            bindings, quotas, refused, digest = decode_published_snapshot(
                data, self.max_bindings, self.max_entities)
        except ValueError as exc:
            self._fail_closed(generation, exc, stamp)
            return
        same_acls = (stamp == self._stamp and not self._failed
                     and self._authorizer is not None)
        if self._failed:
            self.say("the published ACLs and quotas are read again")
        self._failed = False
        allow_if_no_acl = self.allow_if_no_acl
        self._snapshot = Snapshot(generation, None if bindings is None else tuple(bindings),
                                  quotas, refused, acls_digest=digest)
        if bindings is None:  # refused where they are kept (said there)
            bindings, allow_if_no_acl = [], False
        self._generation = generation
        self._quotas = quotas
        if same_acls:  # the quotas alone moved: the authorizer (and its cache) stays
            return
        self._stamp = stamp
        self._authorizer = Authorizer(bindings, super_users=self.super_users,
                                      allow_if_no_acl=allow_if_no_acl,
                                      cache_entries=self.cache_entries)

    def _torn(self, now: float, exc: Exception) -> None:
        """A read that did not hold still: keep what was read before (its
        generation is not taken), try again after :data:`TORN_RETRY_S`, and
        fail closed once none has held still for :data:`TORN_GRACE_S`."""
        if self._torn_since is None:
            self._torn_since = now
        self._retry_at = now + TORN_RETRY_S
        if self._authorizer is None or now - self._torn_since >= TORN_GRACE_S:
            self._fail_closed(None, exc, FAILED_STAMP)

    def _fail_closed(self, generation: int | None, exc: Exception, stamp: int) -> None:
        """The super users only, and no quotas; the generation taken only when
        given (a document that decodes badly stays bad until the next one),
        ``stamp`` the ACLs' stamp of the authorizer made."""
        if not self._failed:
            self.say(f"the published ACLs and quotas cannot be read ({exc}); allowing "
                     "the super users only, and no quotas, until they can")
        self._failed = True
        if generation is not None:
            self._generation = generation
        self._snapshot = Snapshot(self._generation if generation is None else generation,
                                  None, QuotaSet(), failure=str(exc))
        self._quotas = QuotaSet()
        self._stamp = stamp
        self._authorizer = Authorizer([], super_users=self.super_users, allow_if_no_acl=False,
                                      cache_entries=self.cache_entries)

    def snapshot(self) -> Snapshot:
        """What the current generation holds (module docstring)."""
        self._refresh()
        return self._snapshot

    def authorizer(self) -> Authorizer | None:
        """The authorizer of now; None with the authorizer off."""
        if not self.enabled:
            return None
        self._refresh()
        return self._authorizer

    def quotas(self) -> QuotaSet:
        self._refresh()
        return self._quotas

    def acls_stamp(self) -> int:
        """The ACLs' stamp (:func:`acls_stamp_of`) of the document the current
        authorizer was built from, not the document's now: a read that did not
        hold still keeps the authorizer before, and its stamp with it
        (:data:`FAILED_STAMP` once it fails closed)."""
        self._refresh()
        return self._stamp

    def allows(self, identity: Identity, operation: Operation, resource_type: ResourceType,
               name: str) -> bool:
        """May ``identity`` do ``operation`` on the resource: everything with the
        authorizer off, and for the broker's own user over the Unix socket."""
        if not self.enabled:
            return True
        if identity.host == UNIX_HOST and identity.principal == self.own:
            return True
        return self.authorizer().authorize(identity, operation, resource_type, name)


class KeptDecisions:
    """The decisions made for one connection by the authorizer of one ACLs'
    stamp (its processor's and its handler's each keep one): a dict lookup
    per request and resource, the authorizer asked once; ``stamp`` is
    :meth:`AccessView.acls_stamp` of the authorizer that made them (a quota
    change keeps them). Past ``limit`` the oldest kept decision is forgotten,
    or (``keep`` False: a listing's checks, which must not push out the
    decisions of the data path) the new one is not kept."""

    __slots__ = ("allowed", "stamp")

    def __init__(self) -> None:
        self.allowed: dict[tuple, bool] = {}
        self.stamp = -1

    def decide(self, access: AccessView, identity: Identity, operation: Operation,
               resource_type: ResourceType, name: str, limit: int, keep: bool = True) -> bool:
        stamp = access.acls_stamp()
        allowed = self.allowed
        if self.stamp != stamp:
            allowed.clear()
            self.stamp = stamp
        key = (operation, resource_type, name)
        decision = allowed.get(key)
        if decision is None:
            decision = access.allows(identity, operation, resource_type, name)
            if len(allowed) < limit:
                allowed[key] = decision
            elif keep:
                del allowed[next(iter(allowed))]
                allowed[key] = decision
        return decision


def publish_at_start(name: str, log_dir: str, config,
                     say: Callable[[str], None] = _say) -> SharedRegion:
    """Create the region ``name`` of ``acl.max.bytes`` and publish the first
    document: a standalone broker's ``acls.json`` and ``quotas.json`` (from its
    first log dir; one that cannot be taken is said once, and a bad ACL file
    allows the super users only), a cluster member's nothing but the super
    users until hb-registrar has read ZooKeeper's."""
    capacity = config["acl.max.bytes"]
    if config["zookeeper.connect"].strip():
        data = encode_published([], QuotaSet(), refused="not read from ZooKeeper yet")
    else:
        first = os.path.abspath(log_dir)
        others = [d for d in map(os.path.abspath, config.log_dirs) if d != first]
        data = load_published(log_dir, config["acl.max.bindings"],
                              config["quota.max.principals"], say, others)
        if len(data) > capacity:
            say(f"the ACLs and quotas take {len(data)} bytes, more than acl.max.bytes "
                f"({capacity}); denying all but super.users until it is raised")
            data = encode_published([], QuotaSet(), refused="longer than acl.max.bytes")
    region = SharedRegion.create(name, PublishedDocument.region_size(capacity))
    try:
        PublishedDocument.create(region, capacity, data)
    except BaseException:
        region.close()
        region.unlink()
        raise
    return region


def open_access(plan, config, readonly: bool = True) -> AccessView:
    """A worker's view of the broker's ACLs and quotas (``plan.access_name``)."""
    document = PublishedDocument.attach(plan.access_name, readonly)
    return AccessView(document, enabled=config["authorizer.enable"],
                      super_users=parse_super_users(config["super.users"]),
                      allow_if_no_acl=config["allow.everyone.if.no.acl.found"],
                      max_bindings=config["acl.max.bindings"],
                      max_entities=config["quota.max.principals"],
                      cache_entries=config["acl.cache.entries"])
