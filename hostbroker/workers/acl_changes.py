"""The kept encoding of a standalone broker's ACL changes (part of the
handler's access admin, :mod:`hostbroker.workers.handler_acls`).

Owns: the :class:`~hostbroker.security.store.AclEncoding` a handler keeps
between changes (of the bindings it last wrote or published: made before
the admin lock when the one kept is not of the bindings published now), the
document a change publishes from it and its check against ``acl.max.bytes``
(made again without the strings no binding uses before a change is refused
for its size, so a change is refused only when the set, freshly encoded as
a start would publish it, does not fit), whether a change would publish
what is published already, and :class:`_Refused`, a change refused whole.
"""

from __future__ import annotations

from hostbroker.errors import ErrorCode
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import AclEncoding


class _Refused(Exception):
    """A change refused whole: its code and one line."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class AclChanges:
    """Mixin of the handler's access admin (module docstring)."""

    _access_encoding: AclEncoding | None = None  # of the bindings of the last change

    def _access_is_published(self, digest: str | None, quotas: QuotaSet,
                             refused: str | None) -> bool:
        """Is what a change would publish the document published now: the ACLs
        of the file of ``digest`` (the document names the digest of the file
        it was made from), ``quotas`` and ``refused``? False when it cannot be
        read."""
        snapshot = self.access.snapshot()
        return (snapshot.failure is None and snapshot.acls_digest == digest
                and snapshot.refused == refused and snapshot.quotas == quotas
                and self._access_settled(snapshot.generation))

    def _acl_encoding_ahead(self) -> None:
        """Before the lock: the encoding of the bindings published now, when the
        one kept is not of them (this handler's first change, or one after
        another's), so the change under the lock finds it made (the file is
        the published one, the usual case) and costs what it changes."""
        snapshot = self.access.snapshot()
        kept = self._access_encoding
        if snapshot.bindings is not None and snapshot.acls_digest is not None \
                and (kept is None or kept.digest != snapshot.acls_digest):
            kept = self._access_encoding = AclEncoding(snapshot.bindings)
            kept.digest = snapshot.acls_digest

    def _acl_encoding(self, bindings: set, digest: str | None) -> AclEncoding:
        """The :class:`~hostbroker.security.store.AclEncoding` of ``bindings``
        (those of the ACL file of ``digest``): the one kept, when it is of that
        file, else one made now (and kept)."""
        kept = self._access_encoding
        if kept is None or digest is None or kept.digest != digest:
            kept = self._access_encoding = AclEncoding(bindings)
            kept.digest = digest
        return kept

    def _acl_document(self, encoding: AclEncoding, quotas: QuotaSet, refused: str | None,
                      digest: str | None) -> bytes:
        """The document a change publishes; :class:`_Refused` when even made
        again without stale strings (the bytes a start publishes of the same
        set) it is longer than ``acl.max.bytes``."""
        document = encoding.published(quotas, refused, digest)
        capacity = self.config["acl.max.bytes"]
        if len(document) > capacity and encoding.stale:
            encoding.compact()
            document = encoding.published(quotas, refused, digest)
        if len(document) > capacity:
            raise _Refused(ErrorCode.INVALID_REQUEST,
                           f"the ACLs and quotas would take {len(document)} bytes, more "
                           f"than acl.max.bytes ({capacity}); nothing changed")
        return document
