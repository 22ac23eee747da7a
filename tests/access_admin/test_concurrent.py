"""Clients changing the ACLs and quotas at once, through both handlers of a
real broker: the admin lock makes each change whole, so none is lost."""

from __future__ import annotations

import threading

from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls as w
from tests.access_admin.support import (
    alter, create, delete, described, entry, file_acls, published_now, quotas_of)

CLIENTS = 4
EACH = 25


def handler_requests(broker) -> list[int]:
    """Each handler's ``requests`` counter, as ``hostbroker top`` reads it."""
    from hostbroker.config import Config
    from hostbroker.top import KIND_NAMES, attach

    board, table, _ = attach(Config.build(overrides=broker._naming()))
    try:
        return [row["counters"]["requests"] for row in board.snapshot()
                if KIND_NAMES.get(row.get("kind")) == "handler"]
    finally:
        board.close()
        table.close()


def test_changes_at_once_lose_nothing(broker):
    failures: list = []
    before = handler_requests(broker)
    assert len(before) == 2

    def work(n: int) -> None:
        try:
            uri = broker.tcp if n % 2 else broker.unix
            for i in range(EACH):
                # a connection each: connections are spread over the handlers
                with broker.client(uri) as c:
                    results = create(c, entry(f"c{n}-{i}", f"User:u{n}"))
                    if results != [(ErrorCode.NONE, None)]:
                        failures.append(results)
                    if alter(c, (f"User:u{n}", {"request_rate": i + 1})) != \
                            [(ErrorCode.NONE, None)]:
                        failures.append(("quota", n, i))
                    if i % 5 == 4:  # and some deletions between
                        answer = delete(c, w.AclFilterEntry(resource_name=f"c{n}-{i - 1}"))
                        if len(answer.results[0].deleted) != 1:
                            failures.append(("delete", n, i))
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures
    # the changes went through both handlers: the lock was contended between processes
    now = handler_requests(broker)
    assert all(after - was >= 10 for after, was in zip(now, before)), (before, now)
    deleted = {f"c{n}-{i - 1}" for n in range(CLIENTS) for i in range(EACH) if i % 5 == 4}
    wanted = {entry(f"c{n}-{i}", f"User:u{n}") for n in range(CLIENTS) for i in range(EACH)
              if f"c{n}-{i}" not in deleted}
    with broker.client() as c:
        assert described(c) == wanted
        assert quotas_of(c) == {f"User:u{n}": {"request_rate": EACH} for n in range(CLIENTS)}
    assert len(file_acls(broker)) == len(wanted)
    assert len(published_now(broker)[1]) == len(wanted)
