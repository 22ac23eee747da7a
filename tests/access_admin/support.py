"""What the access control admin tests share: building requests, reading the
document a broker published (its shared memory attached read-only, as any
other process of the broker attaches it) and its files."""

from __future__ import annotations

import contextlib
import json
import os

from hostbroker.client.simple import SimpleClient
from hostbroker.config import Config
from hostbroker.protocol import acls as w
from hostbroker.security.store import decode_published
from hostbroker.shm.published import PublishedDocument
from hostbroker.workers.plan import shm_token

TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
DENY, ALLOW = 2, 3


def entry(name="orders", principal="User:alice", *, rtype=TOPIC, pattern=LITERAL, host="*",
          op=READ, perm=ALLOW) -> w.AclEntry:
    return w.AclEntry(rtype, name, pattern, principal, host, op, perm)


def create(client: SimpleClient, *entries: w.AclEntry) -> list[tuple[int, str | None]]:
    answer = client.request(w.CreateAclsRequest(tuple(entries)))
    return [(r.error_code, r.error_message) for r in answer.results]


def describe(client: SimpleClient, **fields) -> w.DescribeAclsResponse:
    return client.request(w.DescribeAclsRequest(w.AclFilterEntry(**fields)))


def described(client: SimpleClient, **fields) -> set[w.AclEntry]:
    answer = describe(client, **fields)
    assert answer.error_code == 0, answer
    return set(answer.acls)


def delete(client: SimpleClient, *filters: w.AclFilterEntry) -> w.DeleteAclsResponse:
    return client.request(w.DeleteAclsRequest(tuple(filters)))


def alter(client: SimpleClient, *entities: tuple[str, dict]) -> list[tuple[int, str | None]]:
    answer = client.request(w.AlterQuotasRequest(tuple(
        w.QuotaEntity(name, tuple(w.QuotaValue(k, v) for k, v in values.items()))
        for name, values in entities)))
    return [(r.error_code, r.error_message) for r in answer.results]


def quotas_of(client: SimpleClient, *names: str) -> dict[str, dict[str, int]]:
    answer = client.request(w.DescribeQuotasRequest(tuple(names)))
    assert answer.error_code == 0 and not answer.truncated, answer
    return {e.entity: {v.key: v.value for v in e.quotas} for e in answer.entities}


@contextlib.contextmanager
def published(broker):
    """The broker's published document, attached read-only."""
    config = Config.build(overrides=broker._naming())
    document = PublishedDocument.attach(f"/{shm_token(config)}-access", readonly=True)
    try:
        yield document
    finally:
        document.close()


def published_now(broker) -> tuple[int, list | None, object]:
    """``(generation, bindings or None, quotas)`` the broker's processes read now."""
    with published(broker) as document:
        generation, data = document.read()
    bindings, quotas = decode_published(data, 10**6, 10**6)
    return generation, bindings, quotas


def acl_file(broker) -> str:
    return os.path.join(broker.settings["log.dirs"].split(",")[0], "acls.json")


def quota_file(broker) -> str:
    return os.path.join(broker.settings["log.dirs"].split(",")[0], "quotas.json")


def file_acls(broker) -> list[dict]:
    with open(acl_file(broker)) as f:
        return json.load(f)["acls"]


def kill_a_publisher(broker, document: bytes = b"half written") -> None:
    """What a publisher killed mid-write leaves: the idle half of the
    document filled (and its length), the flip never made."""
    from hostbroker.shm.published import _LENGTH, _STATE
    with published(broker) as attached:
        writable = PublishedDocument.attach(attached.region.name, readonly=False)
    try:
        idle = 1 - (writable._words[_STATE] & 1)
        start = writable._half(idle)
        writable.region.buf[start:start + len(document)] = document
        writable._words[_LENGTH + idle] = len(document)
    finally:
        writable.close()
