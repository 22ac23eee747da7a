"""The handler's answers to the access control admin requests of a
standalone broker: CREATE_ACLS (22), DELETE_ACLS (23), DESCRIBE_ACLS (24),
ALTER_QUOTAS (25) and DESCRIBE_QUOTAS (26) (docs/spec/protocol.md, "Access
control"; docs/security.md).

Owns: turning the wire's entries into the model's
(:mod:`hostbroker.security.acl`, :mod:`hostbroker.security.quota`) and back,
and the one way a change is made. A change (CREATE_ACLS, DELETE_ACLS,
ALTER_QUOTAS) runs under the admin lock, which makes this handler the only
writer of the files and of the published document while it holds it:

1. read the file it changes (``acls.json`` or ``quotas.json`` in the first log
   dir, :mod:`hostbroker.security.store`); take the other part (the quotas,
   or the ACLs and whether they are refused) from the document published
   now, so a change of one file never judges the other again;
2. apply the change; check it whole against ``acl.max.bindings`` (or
   ``quota.max.principals``), the bytes a start reads back, and the published
   document against ``acl.max.bytes``: past any of them every entry of the
   change is refused (INVALID_REQUEST naming the setting) and nothing of it is
   kept;
3. write the file atomically when the change changes it, then publish the
   document every process reads (what a start publishes from the same
   files, :func:`~hostbroker.security.store.encode_published`) unless the
   one published is already of that ACL file (its digest) and those quotas,
   then answer.

The work under the lock is the change's where it can be: the handler keeps
the set it last wrote or published encoded both ways
(:class:`~hostbroker.security.store.AclEncoding`,
:mod:`hostbroker.workers.acl_changes`), so a change encodes the
bindings it adds and drops those it removes, and joins the rest in C; the
file is still read and hashed at every change (it is the truth). The
encoding of the bindings published now is made before the lock is taken
when the one kept is not of them (a handler's first change, one after
another handler's): under the lock it is made whole only when the file is
not the published one (an operator's edit).

A crash between 3's write and its publish leaves the file as the truth: the
next start publishes it, and so does the retry of the change (it finds
nothing to change in the file, and a published document that differs). A
stored file that cannot be read refuses every change of it (STORAGE_ERROR,
naming the file) until an operator mends or removes it; the other file's
changes go on, keeping its part as published (only when the document itself
cannot be read is the other file read, as a start would, and what that
drops said in the log).

The descriptions (DESCRIBE_ACLS, DESCRIBE_QUOTAS) read the published document:
what every process enforces now. They are cut to ``response.max.bytes``
(``truncated`` 1); a change whose answer would not fit is refused (DELETE_ACLS)
or loses its messages past the bound (CREATE_ACLS, ALTER_QUOTAS), never made
unanswerable. DELETE_ACLS examines at most :data:`SCANS_PER_MAX_BINDING` x
``acl.max.bindings`` bindings for one request, however many filters it holds
(filters naming a resource or a principal look only at theirs, by index).

In cluster mode the ACLs and quotas are ZooKeeper's: every one of these
requests is refused with a line pointing at ``hostbroker acls --zookeeper``.
Whether a principal may make them at all (ALTER or DESCRIBE on the cluster)
is the generic authorization check's, not this module's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls as wire
from hostbroker.security.acl import AclBinding, BindingIndex
from hostbroker.security.admin_wire import (binding_of, entity_named, entry_bytes, entry_of,
                                           filter_of, fit_messages, quota_entity_bytes)
from hostbroker.security.quota import DEFAULT_ENTITY, QUOTA_KEYS, QuotaSet, check_bound
from hostbroker.security.store import (
    ACL_FILE,
    QUOTA_FILE,
    AccessFileError,
    acls_of_file,
    file_digest,
    read_acl_bytes,
    read_acls,
    read_quotas,
    write_acls,
    write_quotas,
)
from hostbroker.shm.published import PublishedDocument, TornDocumentError
from hostbroker.workers.acl_changes import AclChanges, _Refused

ACCESS_ADMIN_KEYS = frozenset({wire.CREATE_ACLS, wire.DELETE_ACLS, wire.DESCRIBE_ACLS,
                               wire.ALTER_QUOTAS, wire.DESCRIBE_QUOTAS})
SCANS_PER_MAX_BINDING = 10  # DELETE_ACLS: bindings examined per request, x acl.max.bindings
_CLUSTER_REFUSAL = ("cluster mode: the ACLs and quotas are kept in ZooKeeper; change them "
                    "with hostbroker acls|quotas --zookeeper")
_ANSWER_SLACK = 1024  # bytes of an answer besides its entries (header, counts, message)


# -- the mixin -------------------------------------------------------------

class AccessAdmin(AclChanges):
    """Mixin of :class:`HandlerWorker`: keys 22-26 (module docstring)."""

    _access_writable: PublishedDocument | None = None
    _access_kept: dict | None = None  # file name -> (its stamp, what it holds)

    def _access_request(self, p, conn_id, seq, corr, key, request) -> None:
        if self.config["zookeeper.connect"].strip():
            response = self._access_cluster_refusal(key, request)
        elif key == wire.CREATE_ACLS:
            response = self._create_acls(request)
        elif key == wire.DELETE_ACLS:
            response = self._delete_acls(request)
        elif key == wire.DESCRIBE_ACLS:
            response = self._describe_acls(request)
        elif key == wire.ALTER_QUOTAS:
            response = self._alter_quotas(request)
        else:
            response = self._describe_quotas(request)
        self._reply(p, conn_id, seq, corr, response)

    @staticmethod
    def _access_cluster_refusal(key, request):
        """Every entry refused; the line given once (the first entry's), so the
        answer stays small however many entries the request holds."""
        code = ErrorCode.INVALID_REQUEST

        def once(kind, count: int) -> tuple:
            return tuple(kind(code, _CLUSTER_REFUSAL if i == 0 else None) for i in range(count))

        if key == wire.CREATE_ACLS:
            return wire.CreateAclsResponse(once(wire.EntryResult, len(request.creations)))
        if key == wire.DELETE_ACLS:
            return wire.DeleteAclsResponse(once(wire.DeleteAclsFilterResult,
                                                len(request.filters)))
        if key == wire.DESCRIBE_ACLS:
            return wire.DescribeAclsResponse(code, _CLUSTER_REFUSAL)
        if key == wire.ALTER_QUOTAS:
            return wire.AlterQuotasResponse(once(wire.EntryResult, len(request.entities)))
        return wire.DescribeQuotasResponse(code)

    # -- the one way a change is made --------------------------------------
    @property
    def _access_dir(self) -> str:
        return self.plan.log_dirs[0]

    @property
    def _access_others(self) -> list[str]:
        return self.plan.log_dirs[1:]

    @contextlib.contextmanager
    def _access_locked(self):
        try:
            self.lock.acquire()
        except TimeoutError as e:
            raise _Refused(ErrorCode.BROKER_NOT_AVAILABLE,
                           f"access control admin busy: {e}; try again") from e
        try:
            yield
        finally:
            self.lock.release()

    def _change(self, change_acls: Callable[[set], set] | None = None,
                change_quotas: Callable[[QuotaSet], QuotaSet] | None = None) -> None:
        """Make one change (of the ACLs or of the quotas) as the module
        docstring says; :class:`_Refused` when it is not made."""
        max_bindings = self.config["acl.max.bindings"]
        max_entities = self.config["quota.max.principals"]
        directory = self._access_dir
        self._acl_encoding_ahead()
        with self._access_locked():
            bindings, acls_refused, quotas, digest = self._access_base(change_acls is not None)
            acl_bytes = None
            if change_acls is not None:
                changed_bindings, changed_quotas = change_acls(set(bindings)), quotas
                file_changed = changed_bindings != bindings
                if len(changed_bindings) > max_bindings:
                    raise _Refused(ErrorCode.INVALID_REQUEST,
                                   f"{len(changed_bindings)} ACLs would be more than "
                                   f"acl.max.bindings ({max_bindings}); nothing changed")
            else:
                changed_bindings, changed_quotas = bindings, change_quotas(quotas)
                file_changed = changed_quotas != quotas
                named = len(changed_quotas.entities) - (DEFAULT_ENTITY in changed_quotas.entities)
                if named > max_entities:
                    raise _Refused(ErrorCode.INVALID_REQUEST,
                                   f"{named} principals with quotas would be more than "
                                   f"quota.max.principals ({max_entities}); nothing changed")
            if not file_changed and self._access_is_published(digest, changed_quotas,
                                                               acls_refused):
                return  # a no-op, and what the file holds is what every process reads
            # the encoding kept from the last change, when it is of these bindings:
            # the work under the lock is the change's, not the whole set's
            encoding = self._acl_encoding(bindings, digest)
            if file_changed and change_acls is not None:
                encoding.update(changed_bindings)
                acl_bytes = encoding.file_bytes()  # (written below, as it is)
                digest = encoding.digest = file_digest(acl_bytes)
            document = self._acl_document(encoding, changed_quotas, acls_refused, digest)
            name = ACL_FILE if change_acls is not None else QUOTA_FILE
            if file_changed:
                self._access_write(name, changed_bindings, changed_quotas, acl_bytes, digest)
            # the file is the truth from here: a crash now is mended by the next
            # start, or by the next change (even a no-op: the document differs)
            try:
                self._access_publish(document)
            except (OSError, ValueError) as e:
                raise _Refused(ErrorCode.STORAGE_ERROR,
                               f"written to {os.path.join(directory, name)}, not published: "
                               f"{e}; retry") from None

    def _access_base(self, acls: bool) -> tuple[set, str | None, QuotaSet, str | None]:
        """``(bindings, why the ACLs are refused or None, quotas, the digest of
        the ACL file they are)`` a change of
        the ACLs (``acls``) or of the quotas starts from: the file it changes,
        read (refused whole when it cannot be), and the other part as it is
        published now, so a change of one file never judges the other again
        (an operator's edit of the other file waits for its own change or the
        next start). Only when the document cannot be read (or is not the
        generation the view read) is the other file read instead, as a start
        would; what that drops is said in the log."""
        max_bindings = self.config["acl.max.bindings"]
        max_entities = self.config["quota.max.principals"]
        directory, others = self._access_dir, self._access_others
        read_digest = None

        def the_acls() -> set:
            nonlocal read_digest
            # the file's bytes (cheap); decoded only when they are neither those
            # this handler kept nor those the published document was made from
            data = read_acl_bytes(directory, max_bindings, others)
            digest = read_digest = file_digest(data)
            kept = (self._access_kept or {}).get(ACL_FILE)
            if kept is not None and kept[0] == digest:
                if isinstance(kept[1], AccessFileError):
                    raise kept[1]  # (a bad file is not decoded again at every change)
                return set(kept[1])
            snapshot = self.access.snapshot()
            if snapshot.acls_digest == digest and snapshot.bindings is not None \
                    and self._access_settled(snapshot.generation):
                value = frozenset(snapshot.bindings)
            else:
                try:
                    value = frozenset(acls_of_file(directory, data, max_bindings))
                except AccessFileError as e:
                    self._access_keep(ACL_FILE, digest, e)
                    raise
            self._access_keep(ACL_FILE, digest, value)
            return set(value)

        def the_quotas() -> QuotaSet:
            return self._access_read(
                QUOTA_FILE, lambda: read_quotas(directory, max_entities, others))

        try:
            mine = the_acls() if acls else the_quotas()
        except AccessFileError as e:
            raise _Refused(ErrorCode.STORAGE_ERROR,
                           f"{e}; no change until it is mended or removed") from None
        snapshot = self.access.snapshot()
        if snapshot.failure is None and self._access_settled(snapshot.generation):
            if acls:
                return mine, None, snapshot.quotas, read_digest
            return (set(snapshot.bindings or ()), snapshot.refused, mine,
                    snapshot.acls_digest)
        try:
            if acls:
                return mine, None, the_quotas(), read_digest
            return the_acls(), None, mine, read_digest
        except AccessFileError as e:
            if acls:
                self._access_say(f"{e}; publishing no quotas until it is mended")
                return mine, None, QuotaSet(), read_digest
            self._access_say(f"{e}; publishing: denying all but super.users until it is "
                             "mended")
            return set(), str(e), mine, None

    def _access_settled(self, generation: int) -> bool:
        """Is the document published now readable, and of ``generation``
        (the view may have kept an older one over a read that did not hold
        still)? Under the lock nobody else publishes."""
        try:
            return self.access.document.read()[0] == generation
        except TornDocumentError:
            return False

    def _access_say(self, line: str) -> None:
        self.access.say(line)

    def _access_write(self, name: str, bindings: set, quotas: QuotaSet,
                      acl_bytes: bytes | None, digest: str | None = None) -> None:
        max_bindings = self.config["acl.max.bindings"]
        max_entities = self.config["quota.max.principals"]
        directory = self._access_dir
        try:
            if name == ACL_FILE:
                write_acls(directory, bindings, max_bindings, acl_bytes)
                self._access_keep(ACL_FILE, digest or file_digest(acl_bytes),
                                  frozenset(bindings))
            else:
                write_quotas(directory, quotas, max_entities)
                self._access_wrote(QUOTA_FILE, quotas)
        except AccessFileError as e:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"{e}; nothing changed") from None
        except OSError as e:
            # a failure after the rename (the directory's fsync) leaves the file
            # changed: then it is published like any other change
            (self._access_kept or {}).pop(name, None)
            if not self._access_holds(name, bindings, quotas):
                raise _Refused(ErrorCode.STORAGE_ERROR,
                               f"{directory}: {e.strerror or e}; nothing changed") from None

    def _access_holds(self, name: str, bindings: set, quotas: QuotaSet) -> bool:
        """Does the file ``name`` hold ``bindings`` (or ``quotas``) now?"""
        directory = self._access_dir
        try:
            if name == ACL_FILE:
                return set(read_acls(directory, self.config["acl.max.bindings"])) == bindings
            return read_quotas(directory, self.config["quota.max.principals"]) == quotas
        except AccessFileError:
            return False

    def _access_stamp(self, name: str):
        """What tells one ``name`` file from another: its device, inode (a
        change writes a new file), time, size and the generation published
        now (every change publishes under the lock, so two files of one stamp
        are one file); None without one."""
        try:
            st = os.stat(os.path.join(self._access_dir, name), follow_symlinks=False)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size,
                self.access.document.generation)

    def _access_read(self, name: str, read: Callable):
        """``read()`` of the file ``name``, kept from this handler's last read
        or write of it while the file is the same one: a file changed since (by
        another handler, or an operator) is read again. At 100,000 ACLs a read
        takes seconds; a handler making change after change reads none. A
        file that could not be read is kept as such under its stamp too (a
        bad file of tens of megabytes is not decoded again at every change)."""
        if self._access_kept is None:
            self._access_kept = {}
        stamp = self._access_stamp(name)
        kept = self._access_kept.get(name)
        if stamp is not None and kept is not None and kept[0] == stamp:
            if isinstance(kept[1], AccessFileError):
                raise kept[1]
            return kept[1]
        try:
            value = read()
        except AccessFileError as e:
            if stamp is not None:
                self._access_kept[name] = (stamp, e)
            raise
        if stamp is not None:
            self._access_kept[name] = (stamp, value)
        return value

    def _access_keep(self, name: str, digest: str, value) -> None:
        """Keep ``value`` as what the file of content ``digest`` holds."""
        if self._access_kept is None:
            self._access_kept = {}
        self._access_kept[name] = (digest, value)

    def _access_wrote(self, name: str, value) -> None:
        """Kept as read: stamped with the generation the publish that follows
        will make (a stamp that misses it only costs a read)."""
        if self._access_kept is None:
            self._access_kept = {}
        stamp = self._access_stamp(name)
        if stamp is not None:
            self._access_kept[name] = (stamp[:-1] + (stamp[-1] + 1,), value)

    def _access_publish(self, document: bytes) -> None:
        if self._access_writable is None:
            self._access_writable = PublishedDocument.attach(self.plan.access_name,
                                                             readonly=False)
        generation = self._access_writable.publish(document)
        # what this handler kept of the files as they were at the generation it
        # published over is still theirs (nobody else writes under the lock)
        for name, (stamp, value) in list((self._access_kept or {}).items()):
            if isinstance(stamp, tuple) and stamp[-1] == generation - 1:
                self._access_kept[name] = (stamp[:-1] + (generation,), value)

    def _access_published(self):
        """The snapshot of the published document (decoded once per generation
        by the handler's view); :class:`_Refused` when it cannot be read."""
        snapshot = self.access.snapshot()
        if snapshot.failure is not None:
            raise _Refused(ErrorCode.STORAGE_ERROR,
                           f"the published ACLs and quotas cannot be read: {snapshot.failure}")
        return snapshot

    def _acl_index_of(self, held: set) -> BindingIndex:
        """The index of ``held``: the published generation's, built once, when
        ``held`` is what it holds (the usual case: the file is what was
        published), or one of its own."""
        snapshot = self.access.snapshot()
        if snapshot.bindings is not None and len(snapshot.bindings) == len(held) \
                and held.issuperset(snapshot.bindings):
            return self._acl_index(snapshot)
        return BindingIndex(held)

    def _acl_index(self, snapshot) -> BindingIndex:
        """The :class:`BindingIndex` of ``snapshot``'s bindings, built once per generation."""
        kept = getattr(self, "_access_index", None)
        if kept is None or kept[0] != snapshot.generation:
            kept = self._access_index = (snapshot.generation, BindingIndex(snapshot.bindings))
        return kept[1]

    @property
    def _answer_budget(self) -> int:
        return self.max_response_bytes - _ANSWER_SLACK

    # -- CREATE_ACLS -------------------------------------------------------
    def _create_acls(self, request: wire.CreateAclsRequest) -> wire.CreateAclsResponse:
        results: list = [None] * len(request.creations)
        wanted: list[tuple[int, AclBinding]] = []
        for i, entry in enumerate(request.creations):
            try:
                wanted.append((i, binding_of(entry)))
            except ValueError as e:
                results[i] = wire.EntryResult(ErrorCode.INVALID_REQUEST, str(e))
        if wanted:
            outcome = wire.EntryResult(ErrorCode.NONE)
            try:
                self._change(change_acls=lambda held: held | {b for _, b in wanted})
            except _Refused as e:
                outcome = wire.EntryResult(e.code, str(e))
            for i, _ in wanted:
                results[i] = outcome
        return wire.CreateAclsResponse(tuple(fit_messages(results, self._answer_budget)))

    # -- DELETE_ACLS -------------------------------------------------------
    def _delete_acls(self, request: wire.DeleteAclsRequest) -> wire.DeleteAclsResponse:
        filters: list = []
        for entry in request.filters:
            try:
                filters.append(filter_of(entry))
            except ValueError as e:
                filters.append(str(e))
        deleted: list = [None] * len(filters)

        def change(held: set) -> set:
            index = self._acl_index_of(held)
            budget = SCANS_PER_MAX_BINDING * self.config["acl.max.bindings"]
            answer_bytes, gone = 4 * len(filters), set()
            for i, f in enumerate(filters):
                if isinstance(f, str):
                    answer_bytes += 8  # (its message is dropped past the bound)
                    continue
                candidates = index.candidates(f)
                budget -= len(candidates) + 1  # (a filter costs one look at least)
                if budget < 0:
                    raise _Refused(ErrorCode.INVALID_REQUEST,
                                   f"these {len(filters)} filters examine more than "
                                   f"{SCANS_PER_MAX_BINDING} x acl.max.bindings bindings; "
                                   "send fewer or narrower filters; nothing deleted")
                deleted[i] = [b for b in candidates if f.matches(b)]
                answer_bytes += 8 + sum(entry_bytes(entry_of(b)) for b in deleted[i])
                gone.update(deleted[i])
            if answer_bytes > self._answer_budget:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               f"the {len(gone)} ACLs these filters delete do not fit one "
                               "answer (response.max.bytes); delete fewer at once; "
                               "nothing deleted")
            return held - gone

        refusal = None
        if any(not isinstance(f, str) for f in filters):
            try:
                self._change(change_acls=change)
            except _Refused as e:
                refusal = e
        results, said, listed = [], False, 0
        for i, f in enumerate(filters):
            if isinstance(f, str):
                results.append(wire.DeleteAclsFilterResult(ErrorCode.INVALID_REQUEST, f))
            elif refusal is not None:  # the line once: the first refused filter's
                results.append(wire.DeleteAclsFilterResult(
                    refusal.code, None if said else str(refusal)))
                said = True
            else:
                entries = tuple(entry_of(b) for b in deleted[i] or ())
                listed += sum(entry_bytes(e) for e in entries)
                results.append(wire.DeleteAclsFilterResult(ErrorCode.NONE, None, entries))
        # (code 2, message 2, count 4 each; the deleted entries fit, checked under the lock)
        return wire.DeleteAclsResponse(tuple(fit_messages(
            results, self._answer_budget - listed, fixed=8)))

    # -- DESCRIBE_ACLS -----------------------------------------------------
    def _describe_acls(self, request: wire.DescribeAclsRequest) -> wire.DescribeAclsResponse:
        try:
            f = filter_of(request.filter)
        except ValueError as e:
            return wire.DescribeAclsResponse(ErrorCode.INVALID_REQUEST, str(e))
        try:
            snapshot = self._access_published()
        except _Refused as e:
            return wire.DescribeAclsResponse(e.code, str(e))
        if snapshot.bindings is None:
            return wire.DescribeAclsResponse(ErrorCode.STORAGE_ERROR,
                                             f"the ACLs are refused: {snapshot.refused}")
        matched = [b for b in self._acl_index(snapshot).candidates(f) if f.matches(b)]
        entries, used = [], 0
        budget = self._answer_budget
        for b in sorted(matched):
            entry = entry_of(b)
            used += entry_bytes(entry)
            if used > budget:
                return wire.DescribeAclsResponse(
                    ErrorCode.NONE, f"cut to {len(entries)} of the {len(matched)} ACLs "
                    "matched (response.max.bytes); narrow the filter", tuple(entries), 1)
            entries.append(entry)
        return wire.DescribeAclsResponse(ErrorCode.NONE, None, tuple(entries))

    # -- ALTER_QUOTAS ------------------------------------------------------
    def _alter_quotas(self, request: wire.AlterQuotasRequest) -> wire.AlterQuotasResponse:
        results: list = [None] * len(request.entities)
        wanted: list[tuple[int, str, dict]] = []
        for i, entity in enumerate(request.entities):
            try:
                name = entity_named(entity.entity)
                changes: dict[str, int | None] = {}
                for q in entity.quotas:
                    value = None if q.value == wire.REMOVE else q.value
                    check_bound(q.key, value)
                    if q.key in changes:
                        raise ValueError(f"quota {q.key} given twice for {name}")
                    changes[q.key] = value
                if not changes:
                    raise ValueError(f"no quota given for {name}: expected any of "
                                     f"{', '.join(QUOTA_KEYS)}")
            except ValueError as e:
                results[i] = wire.EntryResult(ErrorCode.INVALID_REQUEST, str(e))
                continue
            wanted.append((i, name, changes))

        def change(quotas: QuotaSet) -> QuotaSet:
            return quotas.changed_many((name, changes) for _, name, changes in wanted)

        if wanted:
            outcome = wire.EntryResult(ErrorCode.NONE)
            try:
                self._change(change_quotas=change)
            except _Refused as e:
                outcome = wire.EntryResult(e.code, str(e))
            for i, _, _ in wanted:
                results[i] = outcome
        return wire.AlterQuotasResponse(tuple(fit_messages(results, self._answer_budget)))

    # -- DESCRIBE_QUOTAS ---------------------------------------------------
    def _describe_quotas(self, request: wire.DescribeQuotasRequest
                         ) -> wire.DescribeQuotasResponse:
        try:
            names = [entity_named(e) for e in request.entities]
            quotas = self._access_published().quotas
        except ValueError:
            return wire.DescribeQuotasResponse(ErrorCode.INVALID_REQUEST)
        except _Refused as e:
            return wire.DescribeQuotasResponse(e.code)
        shown = sorted(quotas.entities) if not names else list(dict.fromkeys(names))
        entities, used = [], 0
        for name in shown:
            quota = quotas.entities.get(name)
            values = tuple(wire.QuotaValue(k, v) for k, v in (quota.as_dict() if quota else {}
                                                               ).items())
            entity = wire.QuotaEntity(name, values)
            used += quota_entity_bytes(entity)
            if used > self._answer_budget:
                return wire.DescribeQuotasResponse(ErrorCode.NONE, tuple(entities), 1)
            entities.append(entity)
        return wire.DescribeQuotasResponse(ErrorCode.NONE, tuple(entities))

