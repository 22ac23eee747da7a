"""The consumer offsets (part of ``hb-coordinator``).

Owns: the :class:`~hostbroker.log.offsetstore.OffsetStore` of the first log
dir, the commits written to it and not yet on disk, and the OFFSET_FETCHes
waiting for them; it also names the groups the store holds
(LIST_OFFSET_GROUPS, op ``groups``: every group with a commit synced, or
those asked for, each with the topics it has committed offsets on; in pages
for an answer the handler filters).

An OFFSET_COMMIT is fenced (OFFSET_COMMIT v1, by the group coordinator in
the same process) and its record written in the coordinator's loop; its
``fdatasync`` runs in the coordinator's flusher thread, one for every commit
written while the last one ran (group commit), so group requests go on
while the disk syncs. A commit is answered, and its offsets
become what OFFSET_FETCH reads, when the sync that began after its write
returns. An OFFSET_FETCH waits for the commits written before it: a client
that pipelines a commit and a fetch reads what it committed, and nobody
reads an offset that is not on disk yet.

A sync that fails answers its commits STORAGE_ERROR (their records may still
reach the disk later, as a failed ``fdatasync`` leaves it unknown). At
shutdown the coordinator syncs what is left in its own thread (:meth:`settle`).
"""

from __future__ import annotations

import bisect
import os

from hostbroker.errors import ErrorCode
from hostbroker.log.offsetstore import OffsetRecordTooLargeError, OffsetStore, Written

# The flusher job of the offsets store, told from a partition's by this slot.
OFFSETS_SLOT = -1


def _groups_within(store: OffsetStore, asked: list[str], max_bytes: int,
                   paged: bool = False, after: str | None = None) -> dict:
    """The result of LIST_OFFSET_GROUPS: the groups of ``asked`` the store holds
    (every group when empty), sorted, each as ``[group, [topic, ...]]``, as
    many as fit ``max_bytes`` as they go on the wire (the last perhaps cut to
    its first topics), and whether any were cut.

    ``paged`` (a page of an answer the handler filters, handler_alter.py):
    only the groups sorted after ``after`` (None: from the first), and the
    page ends at a whole group: a group cut within its topics is left for
    the next page, unless it is the page's first (then it is cut, and
    ``partial`` says so). A first group whose name alone passes the page is
    left out, named as ``skip`` for the next page to start after it."""
    if not asked:
        names = store.groups_after(after) if paged else iter(store.groups())
    else:
        names = sorted({g for g in asked if store.topics(g)})
        if after is not None:
            names = names[bisect.bisect_right(names, after):]
    kept, size = [], 0
    for group in names:
        size += 2 + len(group.encode("utf-8", "replace")) + 4
        if size > max_bytes:
            if paged and not kept:
                return {"error": 0, "groups": [], "truncated": True, "skip": group}
            return {"error": 0, "groups": kept, "truncated": True}
        topics = []
        kept.append([group, topics])
        for topic in store.topics(group):
            size += 2 + len(topic.encode("utf-8", "replace"))
            if size > max_bytes:
                if not paged:
                    return {"error": 0, "groups": kept, "truncated": True}
                if len(kept) > 1:
                    kept.pop()  # whole on the next page
                    return {"error": 0, "groups": kept, "truncated": True}
                return {"error": 0, "groups": kept, "truncated": True, "partial": True}
            topics.append(topic)
    return {"error": 0, "groups": kept, "truncated": False}


class OffsetsHost:
    """Commits and fetches of consumer offsets (module docstring). ``flusher``
    is the coordinator's :class:`~hostbroker.workers.flusher.Flusher`;
    ``groups`` its :class:`~hostbroker.workers.coordinator.groups.GroupHost`,
    which fences commits."""

    def __init__(self, store: OffsetStore, groups, flusher):
        self.store = store
        self.groups = groups
        self.flusher = flusher
        self.written: list[tuple[int | None, object, Written]] = []  # (handler, token, commit)
        self.syncing: list[tuple[int | None, object, Written]] = []  # in the flusher's sync now
        self.fetches: list[tuple] = []  # (handler, token, keys, commits ahead)
        self.commits_written = 0  # commits written since start, in order
        self.commits_settled = 0  # of them answered (synced, or failed)

    def handle(self, h: int | None, token, request: dict) -> dict | None:
        """The result of one ``OP_OFFSETS`` request now, or None: answered by
        :meth:`synced` (a commit written, a fetch behind unsynced commits),
        which gives back ``h`` and ``token`` with it: a handler and its token,
        or for a GROUP_PUT None and where its answer goes."""
        try:
            if request["op"] == "groups":  # LIST_OFFSET_GROUPS: what the store holds now
                return _groups_within(self.store, request.get("groups") or [],
                                      request["max_bytes"], "after" in request,
                                      request.get("after"))
            if request["op"] == "commit":
                fence = request.get("fence")
                if fence is not None:
                    code = self.groups.fence(request["group"], *fence)
                    if code != ErrorCode.NONE:
                        return {"error": int(code), "fenced": True}
                written = self.store.write(request["entries"])
                if written is None:
                    return {"error": 0}
                self.written.append((h, token, written))
                self.commits_written += 1
                return None
            if self.commits_settled < self.commits_written:
                self.fetches.append((h, token, request["keys"], self.commits_written))
                return None
            return self._fetch(request["keys"])
        except OffsetRecordTooLargeError as e:
            return {"error": int(e.code), "message": str(e)}
        except OSError as e:
            return {"error": int(ErrorCode.STORAGE_ERROR), "message": str(e)}

    def _fetch(self, keys) -> dict:
        return {"error": 0, "offsets": [list(self.store.fetch(g, t, p)) for g, t, p in keys]}

    def start_sync(self) -> None:
        """Hand the commits written so far to the flusher, unless a sync runs."""
        if not self.written or self.syncing:
            return
        try:
            fd = self.store.dup_fd()
        except OSError as e:  # answered as a failed sync, on the coordinator's next pass
            self.syncing, self.written = self.written, []
            self.flusher.done.put((OFFSETS_SLOT, self, 0, e))
            self.flusher.doorbell.ring()
            return
        self.syncing, self.written = self.written, []
        self.flusher.jobs.put((OFFSETS_SLOT, self, fd, 0))

    def synced(self, error: OSError | None) -> list[tuple]:
        """The flusher's sync returned: ``(handler, token, result)`` of the commits
        it saved and of the fetches no longer behind any; the next sync started."""
        code = ErrorCode.NONE if error is None else ErrorCode.STORAGE_ERROR
        answers = []
        for h, token, written in self.syncing:
            if error is None:
                self.store.apply(written)
            answers.append((h, token, {"error": int(code)} if error is None else
                            {"error": int(code), "message": str(error)}))
        self.commits_settled += len(self.syncing)
        self.syncing = []
        waiting = []
        for h, token, keys, ahead in self.fetches:
            if ahead <= self.commits_settled:
                answers.append((h, token, self._fetch(keys)))
            else:
                waiting.append((h, token, keys, ahead))
        self.fetches = waiting
        if not self.written:
            self.store.maybe_compact()
        self.start_sync()
        return answers

    def settle(self) -> list[tuple]:
        """At shutdown, the flusher stopped: sync here what is written (and any
        sync handed to the flusher too late to run), and answer it all."""
        self.syncing, self.written = self.syncing + self.written, []
        if not self.syncing:
            return []
        error = None
        try:
            fd = self.store.dup_fd()
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            error = e
        return self.synced(error)

    def close(self) -> None:
        self.store.close()
