"""What a process that answers requests knows of access control: the
authorizer and the quotas of the document published now.

Owns: :class:`AccessView`, over the published document of ACLs and quotas
(:mod:`hostbroker.shm.published`, encoded by
:func:`hostbroker.security.store.encode_published`). :meth:`AccessView.authorizer`
gives the :class:`~hostbroker.security.authorizer.Authorizer` built from the
document of the current generation: one aligned load while the generation
holds, a rebuild (and a fresh decision cache) when it moves. A document that
does not decode, or does not hold still, gives an authorizer that allows the
super users only, said once in the broker log; the next good document ends
it. With the authorizer off (``authorizer.enable`` false) there is none:
everything is allowed, and only the quotas are read.

Used by the processors and handlers (one view each); nothing here writes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

from hostbroker.security.authorizer import Authorizer
from hostbroker.security.principals import Principal
from hostbroker.security.quota import QuotaSet
from hostbroker.security.store import decode_published
from hostbroker.shm.published import PublishedDocument, TornDocumentError


def _say(line: str) -> None:
    print(f"hostbroker: {line}", file=sys.stderr, flush=True)


class AccessView:
    """The authorizer and quotas of one process (module docstring)."""

    def __init__(self, document: PublishedDocument, *, enabled: bool,
                 super_users: Iterable[Principal] = (), allow_if_no_acl: bool = False,
                 max_bindings: int = 100_000, max_entities: int = 4096,
                 cache_entries: int = 100_000, say: Callable[[str], None] = _say):
        self.document = document
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.max_bindings, self.max_entities = max_bindings, max_entities
        self.cache_entries = cache_entries
        self.say = say
        self._generation = -1
        self._authorizer: Authorizer | None = None
        self._quotas = QuotaSet()
        self._failed = False

    def _refresh(self) -> None:
        generation = self.document.generation
        if generation == self._generation:
            return
        try:
            generation, data = self.document.read()
            bindings, quotas = decode_published(data, self.max_bindings, self.max_entities)
        except (ValueError, TornDocumentError) as exc:
            if not self._failed:
                self.say(f"the published ACLs and quotas cannot be read ({exc}); allowing "
                         "the super users only, and no quotas, until they can")
            self._failed = True
            bindings, quotas = [], QuotaSet()
            allow_if_no_acl = False
        else:
            if self._failed:
                self.say("the published ACLs and quotas are read again")
            self._failed = False
            allow_if_no_acl = self.allow_if_no_acl
        self._generation = generation
        self._quotas = quotas
        self._authorizer = Authorizer(bindings, super_users=self.super_users,
                                      allow_if_no_acl=allow_if_no_acl,
                                      cache_entries=self.cache_entries)

    def authorizer(self) -> Authorizer | None:
        """The authorizer of now; None with the authorizer off."""
        if not self.enabled:
            return None
        self._refresh()
        return self._authorizer

    def quotas(self) -> QuotaSet:
        self._refresh()
        return self._quotas
