"""The broker settings of access control (docs/security.md): the authorizer,
its super users and the bounds of the ACLs and quotas every process reads,
declared here and concatenated into :data:`hostbroker.config.SETTINGS`, so
``serve --help``, validation and the table in docs/configuration.md come
from them as from every other setting.

Each row is ``(key, type, default, meaning, bounds)``: ``bounds`` is
``(low, high)`` for an int setting, checked to lie between them, and None for
the others; ``super.users`` is checked by :func:`super_users_problem`. Plain
rows, as in :mod:`hostbroker.settings_http`: ``config`` builds its one
declaration from them at import (this module imports nothing of it).
"""

from __future__ import annotations

from hostbroker.security.authorizer import parse_super_users

SECURITY_SETTINGS: tuple[tuple[str, type, object, str, tuple[int, int] | None], ...] = (
    ("authorizer.enable", bool, False,
     "Check every request against the ACLs (docs/security.md): a request a principal may "
     "not make is refused with TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED, and METADATA "
     "leaves out the topics it may not describe. Off: everything is allowed to everyone "
     "(the ACLs are still kept and can be changed).", None),
    ("super.users", str, "",
     "Principals allowed everything whatever the ACLs say, separated by ';' "
     "(User:admin;User:hostbroker). The broker's own user over the Unix socket is always "
     "one.", None),
    ("allow.everyone.if.no.acl.found", bool, False,
     "With the authorizer on, allow a request on a resource no ACL names (Kafka's "
     "setting); off, such a request is refused to all but the super users.", None),
    ("acl.max.bindings", int, 100_000,
     "Most ACL bindings the broker keeps; a CREATE_ACLS past it is refused, and a stored "
     "file or ZooKeeper layout holding more is not read (super users only until mended).",
     (1, 10_000_000)),
    ("acl.max.bytes", int, 16 * 1024 * 1024,
     "Largest document of ACLs and quotas published to every process (shared memory "
     "reserved once at start, twice over: a writer fills the idle half); a change "
     "that would make it longer is refused.",
     (4096, 1024 * 1024 * 1024)),
    ("acl.cache.entries", int, 100_000,
     "Most authorization decisions each process remembers (cleared when the ACLs "
     "change); past it the oldest are forgotten.", (16, 10_000_000)),
    ("acl.connection.cache.entries", int, 256,
     "Most authorization decisions a processor keeps per connection for the requests it "
     "answers or sends on itself (forgotten when the ACLs change; past it the oldest one, and "
     "a METADATA's checks are kept only while there is room).",
     (1, 65_536)),
    ("http.admin.principal", str, "User:admin",
     "The principal a console change made with the admin token is authorized as (with "
     "the authorizer on): hb-http checks the change against the ACLs for it before it "
     "sends it, and answers 403 if it may not.", None),
    ("quota.max.principals", int, 4096,
     "Most principals that may have quotas of their own (besides the default), and most "
     "principals with a quota each processor counts at once (past it, a new one is not "
     "throttled on that processor until one has been idle for a whole span).",
     (1, 1_000_000)),
    ("quota.window.num", int, 11,
     "Windows a principal's rate is measured over (Kafka's quota.window.num): what it did "
     "in them over the time they span.", (2, 100)),
    ("quota.window.size.seconds", int, 1,
     "Length of one quota window, in seconds (Kafka's quota.window.size.seconds).",
     (1, 3600)),
    ("quota.max.throttle.ms", int, 30_000,
     "Longest an answer is held (and its connection not read) for a principal over its "
     "quota; the throttle time a PRODUCE v1 or FETCH v2 answer carries is at most this.",
     (1, 3_600_000)),
)


def super_users_problem(value: str) -> str | None:
    """What is wrong with a ``super.users`` value, or None."""
    try:
        parse_super_users(value)
    except ValueError as e:
        return str(e)
    return None


def principal_problem(value: str) -> str | None:
    """What is wrong with a principal setting (``http.admin.principal``), or None."""
    from hostbroker.security.principals import Principal

    try:
        Principal.parse(value)
    except ValueError as e:
        return str(e)
    return None


SECURITY_CHECKS = {"super.users": super_users_problem, "http.admin.principal": principal_problem}
