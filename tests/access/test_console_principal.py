"""A console change is authorized as ``http.admin.principal`` before hb-http
sends it (it sends it as the broker's own user, whom the broker allows
everything): 403 with one line when that principal may not."""

from __future__ import annotations

import os

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from hostbroker.security.store import write_acls
from tests.console.web import ConsoleBroker

T = ResourceType.TOPIC


def allow(name, operation, principal="User:admin", pattern=PatternType.LITERAL):
    return AclBinding.checked(T, name, pattern, Principal.parse(principal), "*", operation,
                              Permission.ALLOW)


def test_console_changes_need_the_admin_principal_s_acls(tmp_path):
    broker = ConsoleBroker(tmp_path, **{"authorizer.enable": "true",
                                        "http.admin.principal": "User:console"})
    os.makedirs(broker.settings["log.dirs"], exist_ok=True)
    write_acls(broker.settings["log.dirs"], [
        allow("team-", Operation.CREATE, "User:console", PatternType.PREFIXED),
        allow("team-", Operation.ALTER, "User:console", PatternType.PREFIXED),
        allow("other", Operation.CREATE),  # User:admin's, not the console's
    ])
    broker.start()
    try:
        status, _, body = broker.post("/api/topics", {"topic": "team-a", "partitions": 1})
        assert status == 201, body
        status, _, body = broker.post("/api/topics", {"topic": "other", "partitions": 1})
        assert status == 403 and "User:console may not (Create on Topic other)" in str(body)
        status, _, body = broker.post("/api/topics/team-a/partitions", {"partitions": 2})
        assert status == 200, body
        status, _, body = broker.post("/api/topics/team-a/delete", {})
        assert status == 403 and "Delete on Topic team-a" in str(body)
    finally:
        broker.finish()


def test_with_the_authorizer_off_the_console_is_not_asked(tmp_path):
    broker = ConsoleBroker(tmp_path, **{"http.admin.principal": "User:console"}).start()
    try:
        status, _, body = broker.post("/api/topics", {"topic": "any", "partitions": 1})
        assert status == 201, body
    finally:
        broker.finish()
