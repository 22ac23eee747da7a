"""The standalone broker's access control files: ``acls.json`` and ``quotas.json``.

Owns: their bytes and their place (the first log dir, beside the offsets
store), reading them bounded and writing them so a crash leaves the old or
the new file (``hostbroker.log.files``: no symbolic link followed, a
temporary file created exclusively, fsync, rename, fsync of the dir).

``acls.json``::

    {"version": 1, "acls": [{"resourceType": "Topic", "name": "orders",
      "patternType": "Literal", "principal": "User:alice", "host": "*",
      "operation": "Read", "permissionType": "Allow"}, ...]}

sorted, one binding once. ``quotas.json``::

    {"version": 1, "quotas": [{"entity": "User:alice", "producer_byte_rate": 1048576},
      {"entity": "<default>", "request_rate": 1000}, ...]}

A file that is missing is an empty set. One that cannot be read or does not
decode (too large, not JSON, a bad entry, a symbolic link) is
:class:`AccessFileError` naming the file and the problem in one line; the
broker then denies everyone but ``super.users`` (ACLs) or bounds nobody
(quotas), says so, and keeps serving (docs/security.md).

Runs in the supervisor (at start) and the handler that answers an ACL or
quota change (under the admin lock, which makes it the only writer).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os

from hostbroker.log.files import read_file, write_file_atomically
from hostbroker.security.acl import (AclBinding, Operation, PatternType, Permission,
                                     ResourceType, binding_from_json, binding_to_json)
from hostbroker.security.principals import Principal
from hostbroker.security.quota import DEFAULT_ENTITY, Quota, QuotaSet

ACL_FILE = "acls.json"
QUOTA_FILE = "quotas.json"
BYTES_PER_BINDING = 512  # a file may hold this much per binding it may hold


class AccessFileError(ValueError):
    """An access control file that cannot be taken; its text is one line."""


def _versioned(data: bytes, key: str) -> dict:
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("not JSON in UTF-8") from None
    if not isinstance(document, dict) or document.get("version") != 1 \
            or not isinstance(document.get(key), list):
        raise ValueError(f'expected {{"version": 1, "{key}": [...]}}')
    return document


def _order(b: AclBinding) -> tuple:
    """AclBinding's own order, as a tuple sorted in C (at 100,000 bindings
    sorting the dataclasses themselves takes half a second more)."""
    return (b.resource_type.value, b.name, b.pattern.value, b.principal.type,
            b.principal.name, b.host, b.operation.value, b.permission.value)


def encode_acls(bindings) -> bytes:
    entries = [binding_to_json(b) for b in sorted(set(bindings), key=_order)]
    # a field a line, as indent would, but through json's C encoder (indent
    # takes the Python one: three times slower at 100,000 ACLs)
    return json.dumps({"version": 1, "acls": entries}, separators=(",\n", ": "),
                      sort_keys=True).encode() + b"\n"


def decode_acls(data: bytes, max_bindings: int) -> list[AclBinding]:
    """The bindings ``data`` holds; ValueError naming what is wrong."""
    return _bindings(_versioned(data, "acls")["acls"], max_bindings)


def _bindings(entries: list, max_bindings: int) -> list[AclBinding]:
    if len(entries) > max_bindings:
        raise ValueError(f"{len(entries)} ACLs, more than acl.max.bindings ({max_bindings})")
    bindings = []
    for i, entry in enumerate(entries):
        try:
            bindings.append(binding_from_json(entry))
        except ValueError as exc:
            raise ValueError(f"ACL {i}: {exc}") from None
    return sorted(set(bindings), key=_order)


def encode_quotas(quotas: QuotaSet) -> bytes:
    document = {"version": 1, "quotas": [{"entity": e, **q.as_dict()}
                                         for e, q in sorted(quotas.entities.items())]}
    return json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"


def decode_quotas(data: bytes, max_entities: int) -> QuotaSet:
    """The set ``data`` holds; ValueError naming what is wrong."""
    return _quota_set(_versioned(data, "quotas")["quotas"], max_entities)


def _quota_set(entries: list, max_entities: int) -> QuotaSet:
    # max_entities principals of their own, and the default besides
    if len(entries) > max_entities + 1:
        raise ValueError(f"{len(entries)} quota entities, more than quota.max.principals "
                         f"({max_entities}) and the default")
    entities = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("entity"), str):
            raise ValueError("a quota entry is not an object with an 'entity'")
        entity = entry["entity"]
        if entity != DEFAULT_ENTITY:
            entity = str(Principal.parse(entity))
        if entity in entities:
            raise ValueError(f"quota entity {entity[:60]} is named twice")
        entities[entity] = Quota().merged({k: v for k, v in entry.items() if k != "entity"})
    named = len(entities) - (DEFAULT_ENTITY in entities)
    if named > max_entities:
        raise ValueError(f"{named} principals with quotas, more than quota.max.principals "
                         f"({max_entities})")
    return QuotaSet(entities)


def encode_published(bindings, quotas: QuotaSet, refused: str | None = None,
                     acls_digest: str | None = None) -> bytes:
    """The one document every process reads (``shm/published.py``): the ACLs
    and the quotas together, in a compact form of its own, since every process
    decodes it whole on each change: each binding a row of seven numbers (its
    enums' values, and indexes into one table of the names, principals and
    hosts it holds), the quotas as in ``quotas.json``. ``refused`` (one line)
    says the ACLs could not be read where they are kept: every process then
    allows the super users only, quietly (whoever published it said why).
    The same bytes as :meth:`AclEncoding.published` of a fresh encoding of
    the set (:func:`_published_document` lays out both)."""
    strings: dict[str, int] = {}

    def at(text: str) -> int:
        index = strings.get(text)
        if index is None:
            index = strings[text] = len(strings)
        return index

    rows = sorted({(b.resource_type.value, b.name, b.pattern.value, b.principal.type,
                    b.principal.name, b.host, b.operation.value, b.permission.value)
                   for b in bindings})  # (tuples: the order of AclBinding, sorted in C)
    rows = [[rt, at(name), pattern, at(f"{kind}:{who}"), at(host), operation, permission]
            for rt, name, pattern, kind, who, host, operation, permission in rows]
    return _published_document(json.dumps(list(strings), separators=(",", ":")).encode(),
                               json.dumps(rows, separators=(",", ":")).encode(),
                               quotas, refused, acls_digest)


def _published_document(strings: bytes, rows: bytes, quotas: QuotaSet, refused: str | None,
                        acls_digest: str | None) -> bytes:
    """The layout of the published document, given its table of strings and
    its rows already as JSON arrays: version 2, ``strings``, ``acls``,
    ``quotas``, then ``aclsRefused`` and ``aclsDigest`` when there are (in
    that order: the ACLs' stamp, workers/access.py, hashes all but the
    quotas). ``acls_digest`` is the ACL file's (:func:`file_digest`)."""
    parts = [b'{"version":2,"strings":', strings, b',"acls":', rows, b',"quotas":',
             json.dumps([{"entity": e, **q.as_dict()} for e, q in sorted(quotas.entities.items())],
                        separators=(",", ":")).encode()]
    if refused is not None:
        parts += [b',"aclsRefused":', json.dumps(refused).encode()]
    if acls_digest is not None:
        parts += [b',"aclsDigest":', json.dumps(acls_digest).encode()]
    parts.append(b"}")
    return b"".join(parts)


class AclEncoding:
    """One set of bindings encoded both ways a change writes them, kept by the
    handler that makes changes so the next change costs what it changes: the
    entries of ``acls.json`` (the bytes :func:`encode_acls` writes, one entry
    a binding in its order) and the rows of the published document (a table
    of strings, and rows of indexes into it: what
    :func:`decode_published_snapshot` reads). :meth:`update` to another set
    encodes the bindings added and drops those removed; the whole is joined
    in C. Strings no binding uses any more stay in the table until they pass
    a quarter of those in use or :data:`STALE_MAX_BYTES` (then the table and
    the rows are made again, :meth:`compact`: the document is then the very
    bytes :func:`encode_published` makes of the set). ``digest`` is the
    caller's: the :func:`file_digest` of the ``acls.json`` that holds this set."""

    STALE_MAX_BYTES = 1 << 20  # strings no binding uses, kept at most (and a quarter)

    def __init__(self, bindings=()):
        self.digest: str | None = None
        self.bindings = frozenset(bindings)
        self.keys = sorted((_order(b), b) for b in self.bindings)
        self.entries = [self._entry(b) for _, b in self.keys]
        self.compact()

    def compact(self) -> None:
        """Make the table of strings and the rows again from the bindings: no
        string is left that no binding uses (the entries stay)."""
        self.strings: dict[str, int] = {}  # string -> its index in the table
        self.table: list[bytes] = []  # each string as JSON, by index
        self.refs: list[int] = []  # bindings using each string
        self.live = 0  # strings some binding uses
        self.stale_bytes = 0  # bytes of the table's strings no binding uses
        self.rows = [self._row(b) for _, b in self.keys]

    @property
    def stale(self) -> int:
        """Strings of the table no binding uses."""
        return len(self.table) - self.live

    @staticmethod
    def _entry(b: AclBinding) -> bytes:
        return json.dumps(binding_to_json(b), separators=(",\n", ": "),
                          sort_keys=True).encode()

    def _at(self, text: str) -> int:
        index = self.strings.get(text)
        if index is None:
            index = self.strings[text] = len(self.table)
            self.table.append(json.dumps(text).encode())
            self.refs.append(0)
        elif self.refs[index] == 0:  # used again
            self.stale_bytes -= len(self.table[index])
        if self.refs[index] == 0:
            self.live += 1
        self.refs[index] += 1
        return index

    def _drop(self, text: str) -> None:
        index = self.strings[text]
        self.refs[index] -= 1
        if self.refs[index] == 0:
            self.live -= 1
            self.stale_bytes += len(self.table[index])

    def _row(self, b: AclBinding) -> bytes:
        return (f"[{b.resource_type.value},{self._at(b.name)},{b.pattern.value},"
                f"{self._at(str(b.principal))},{self._at(b.host)},{b.operation.value},"
                f"{b.permission.value}]").encode()

    def update(self, bindings: set) -> None:
        """Become the encoding of ``bindings``: the work of the difference."""
        added, removed = bindings - self.bindings, self.bindings - bindings
        if not added and not removed:
            return
        self.digest = None
        keys, entries, rows = self.keys, self.entries, self.rows
        for b in removed:
            i = bisect.bisect_left(keys, (_order(b), b))
            del keys[i], entries[i], rows[i]
            for text in (b.name, str(b.principal), b.host):
                self._drop(text)
        for b in added:
            key = (_order(b), b)
            i = bisect.bisect_left(keys, key)
            keys.insert(i, key)
            entries.insert(i, self._entry(b))
            rows.insert(i, self._row(b))
        self.bindings = frozenset(bindings)
        if self.stale > self.live // 4 or self.stale_bytes > self.STALE_MAX_BYTES:
            self.compact()  # the strings no binding uses: dropped

    def file_bytes(self) -> bytes:
        """``acls.json`` of these bindings (as :func:`encode_acls` writes it)."""
        return b'{"acls": [' + b",\n".join(self.entries) + b'],\n"version": 1}\n'

    def published(self, quotas: QuotaSet, refused: str | None = None,
                  acls_digest: str | None = None) -> bytes:
        """The document :func:`encode_published` describes, of these bindings."""
        return _published_document(b"[" + b",".join(self.table) + b"]",
                                   b"[" + b",".join(self.rows) + b"]",
                                   quotas, refused, acls_digest)


def decode_published(data: bytes, max_bindings: int,
                     max_entities: int) -> tuple[list[AclBinding] | None, QuotaSet]:
    """What :func:`encode_published` wrote: the bindings (None when refused)
    and the quotas; ValueError naming what is wrong."""
    bindings, quotas, _ = decode_published_document(data, max_bindings, max_entities)
    return bindings, quotas


_ENUMS = tuple({member.value: member for member in kind}
               for kind in (ResourceType, PatternType, Operation, Permission))


def decode_published_document(data: bytes, max_bindings: int, max_entities: int
                              ) -> tuple[list[AclBinding] | None, QuotaSet, str | None]:
    """As :func:`decode_published`, and the line saying why the ACLs were
    refused (None when they were not)."""
    return decode_published_snapshot(data, max_bindings, max_entities)[:3]


def decode_published_snapshot(data: bytes, max_bindings: int, max_entities: int) -> tuple:
    """As :func:`decode_published_document`, and the digest of the ACL file
    the bindings were read from (None when not said). Only broker processes write the
    document, from bindings they checked, so a row is taken as it is: its
    shape, its enums and its indexes are checked, its names not again."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("not JSON in UTF-8") from None
    if not isinstance(document, dict) or document.get("version") != 2:
        raise ValueError('expected {"version": 2, ...}')
    strings, rows, entries = (document.get(k) for k in ("strings", "acls", "quotas"))
    if not (isinstance(strings, list) and isinstance(rows, list) and isinstance(entries, list)):
        raise ValueError('expected "strings", "acls" and "quotas": [...]')
    quotas = _quota_set(entries, max_entities)
    digest = document.get("aclsDigest")
    digest = digest if isinstance(digest, str) else None
    if "aclsRefused" in document:
        refused = document["aclsRefused"]
        return None, quotas, refused if isinstance(refused, str) else "refused", digest
    if len(rows) > max_bindings:
        raise ValueError(f"{len(rows)} ACLs, more than acl.max.bindings ({max_bindings})")
    if not all(isinstance(t, str) for t in strings):
        raise ValueError("a published string is not a string")
    principals: dict[int, Principal] = {}
    types, patterns, operations, permissions = _ENUMS
    bindings = []
    try:
        for rt, name, pattern, who, host, operation, permission in rows:
            if name < 0 or who < 0 or host < 0:
                raise IndexError(name)
            principal = principals.get(who)
            if principal is None:
                principal = principals[who] = Principal.parse(strings[who])
            bindings.append(AclBinding(types[rt], strings[name], patterns[pattern], principal,
                                       strings[host], operations[operation],
                                       permissions[permission]))
    except (TypeError, ValueError, KeyError, IndexError):
        raise ValueError(f"published ACL {len(bindings)} is malformed") from None
    return bindings, quotas, None, digest


def load_published(log_dir: str, max_bindings: int, max_entities: int,
                   say, others=()) -> bytes:
    """The document a standalone broker publishes at start, from its files: a
    file that cannot be taken is said in one line (``say``) and, for the
    ACLs, refuses everyone but the super users until it is mended."""
    refused = digest = None
    try:
        data = read_acl_bytes(log_dir, max_bindings, others)
        bindings = acls_of_file(log_dir, data, max_bindings)
        digest = file_digest(data)
    except AccessFileError as exc:
        bindings, refused = [], str(exc)
        say(f"{exc}; denying all but super.users until it is mended")
    try:
        quotas = read_quotas(log_dir, max_entities, others)
    except AccessFileError as exc:
        quotas = QuotaSet()
        say(f"{exc}; no quotas until it is mended")
    return encode_published(bindings, quotas, refused, digest)


def _read(log_dir: str, name: str, limit: int, others=()) -> bytes | None:
    """The file's bytes; None when it is in no log dir. One found in another
    log dir (``others``) but not in the first is refused: it is where a
    reorder of ``log.dirs`` (or a new first disk) left it, and taking "no
    file" then would drop every ACL without a word."""
    path = os.path.join(log_dir, name)
    try:
        data = read_file(path, limit)
    except FileNotFoundError:
        for other in others:
            if os.path.lexists(os.path.join(other, name)):
                raise AccessFileError(
                    f"{path}: missing, but {os.path.join(other, name)} is there: the "
                    "ACLs and quotas are kept in the first log dir; move it there or put "
                    "log.dirs back in order") from None
        return None
    except OSError as exc:
        raise AccessFileError(f"{path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise AccessFileError(f"{path}: longer than {limit} bytes")
    return data


def acl_file_bytes(max_bindings: int) -> int:
    """The longest ``acls.json`` read (a longer one is refused, not read)."""
    return max_bindings * BYTES_PER_BINDING + 1024


def quota_file_bytes(max_entities: int) -> int:
    """The longest ``quotas.json`` read (the default's entry besides the principals')."""
    return (max_entities + 1) * BYTES_PER_BINDING + 1024


def read_acls(log_dir: str, max_bindings: int, others=()) -> list[AclBinding]:
    """The ACLs of a broker whose first log dir is ``log_dir`` ([] without the
    file; ``others``: its other log dirs, see :func:`_read`)."""
    return acls_of_file(log_dir, read_acl_bytes(log_dir, max_bindings, others), max_bindings)


def read_acl_bytes(log_dir: str, max_bindings: int, others=()) -> bytes | None:
    """``acls.json``'s bytes, not decoded (None without it); AccessFileError."""
    return _read(log_dir, ACL_FILE, acl_file_bytes(max_bindings), others)


def acls_of_file(log_dir: str, data: bytes | None, max_bindings: int) -> list[AclBinding]:
    """The ACLs ``acls.json``'s bytes hold; AccessFileError naming the file."""
    if data is None:
        return []
    try:
        return decode_acls(data, max_bindings)
    except ValueError as exc:
        raise AccessFileError(f"{os.path.join(log_dir, ACL_FILE)}: {exc}") from None


def file_digest(data: bytes | None) -> str:
    """What tells one content of a file from another (``-`` for no file): kept
    in the published document, so a change finds the ACLs of a file that is
    the one published without decoding it again."""
    return "-" if data is None else hashlib.sha256(data).hexdigest()


def write_acls(log_dir: str, bindings, max_bindings: int | None = None,
               data: bytes | None = None) -> bytes:
    """Replace ``acls.json`` (the bytes written: ``data`` when the caller
    encoded ``bindings`` already); with ``max_bindings``, AccessFileError
    (nothing written) for a set the next read would refuse: more bindings, or
    more bytes."""
    if data is None:
        data = encode_acls(bindings)
    if max_bindings is not None:
        _check_writable(log_dir, ACL_FILE, data, len(set(bindings)), max_bindings,
                        acl_file_bytes(max_bindings), "acl.max.bindings")
    write_file_atomically(os.path.join(log_dir, ACL_FILE), data)
    return data


def _check_writable(log_dir: str, name: str, data: bytes, count: int, max_count: int,
                    max_bytes: int, setting: str) -> None:
    path = os.path.join(log_dir, name)
    if count > max_count:
        raise AccessFileError(f"{path}: {count} entries would be more than {setting} "
                              f"({max_count})")
    if len(data) > max_bytes:
        raise AccessFileError(f"{path}: {len(data)} bytes would be more than the "
                              f"{max_bytes} a start reads ({BYTES_PER_BINDING} per entry "
                              f"{setting} allows)")


def read_quotas(log_dir: str, max_entities: int, others=()) -> QuotaSet:
    data = _read(log_dir, QUOTA_FILE, quota_file_bytes(max_entities), others)
    if data is None:
        return QuotaSet()
    try:
        return decode_quotas(data, max_entities)
    except ValueError as exc:
        raise AccessFileError(f"{os.path.join(log_dir, QUOTA_FILE)}: {exc}") from None


def write_quotas(log_dir: str, quotas: QuotaSet, max_entities: int | None = None) -> None:
    """Replace ``quotas.json``; with ``max_entities``, AccessFileError (nothing
    written) for a set the next read would refuse."""
    data = encode_quotas(quotas)
    if max_entities is not None:
        named = len(quotas.entities) - (DEFAULT_ENTITY in quotas.entities)
        _check_writable(log_dir, QUOTA_FILE, data, named, max_entities,
                        quota_file_bytes(max_entities), "quota.max.principals")
    write_file_atomically(os.path.join(log_dir, QUOTA_FILE), data)
