#!/usr/bin/env python3
"""What the authorizer costs the data path: ``ab_settings.py`` with broker A
checking every request against 1,000 ACLs and broker B with the authorizer
off, measured alternately in one run.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/authorizer_ab.py sync1 --rounds 4
    .venv/bin/python tools/bench/authorizer_ab.py fetch-parts --partitions 1 --rounds 4
    .venv/bin/python tools/bench/authorizer_ab.py --shared sync1 --rounds 4

The clients connect over TCP, so they are ``User:ANONYMOUS``: A's
``acls.json`` (written into a log dir made for it before A starts) holds 999
bindings of other users on other topics, literal and prefixed, and one that
allows ``User:ANONYMOUS`` everything on the topics ``ab*`` the loads use.
With ``--shared`` the 999 others are all on the loads' own prefix ``ab``
(other users' bindings: a prefix shared by many users on one host), so
every decision finds 1,000 bindings on its resources. (Over the Unix socket
the clients would be the broker's own user, whom no ACL is asked about.)
Every other option is ``ab_settings.py``'s; at the end the ratio A/B of the
medians (of rates; B/A of p50 latencies) is printed: 1.0 is no cost.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]

import ab_settings  # noqa: E402

ACLS = 1000


def bindings(count: int = ACLS, shared: bool = False) -> list:
    from hostbroker.security.acl import (AclBinding, Operation, PatternType, Permission,
                                         ResourceType)
    from hostbroker.security.principals import Principal

    out = [AclBinding.checked(ResourceType.TOPIC, "ab", PatternType.PREFIXED,
                              Principal("User", "ANONYMOUS"), "*", Operation.ALL,
                              Permission.ALLOW)]
    for i in range(count - 1):
        out.append(AclBinding.checked(
            ResourceType.TOPIC,
            "ab" if shared else f"team{i}-" if i % 2 else f"topic-{i}",
            PatternType.PREFIXED if shared or i % 2 else PatternType.LITERAL,
            Principal("User", f"user{i}" if shared else f"user{i % 97}"), "*",
            (Operation.READ, Operation.WRITE, Operation.DESCRIBE)[i % 3], Permission.ALLOW))
    return out


class _Tee(io.StringIO):
    """Kept for the ratio, and shown as it comes."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(text)
        return super().write(text)

    def flush(self) -> None:
        self.out.flush()


def main(argv=None) -> int:
    from hostbroker.security.store import write_acls

    argv = list(sys.argv[1:] if argv is None else argv)
    shared = "--shared" in argv
    if shared:
        argv.remove("--shared")
    root = tempfile.mkdtemp(prefix="hb-authz-")
    try:
        log_dir = os.path.join(root, "logs")
        os.makedirs(log_dir)
        write_acls(log_dir, bindings(shared=shared))
        argv += ["--a", "authorizer.enable=true", "--a", f"log.dirs={log_dir}",
                 "--b", "authorizer.enable=false"]
        shown = _Tee(sys.stdout)
        with contextlib.redirect_stdout(shown):
            status = ab_settings.main(argv)
        text = shown.getvalue()
        medians = re.findall(r"^([AB]) .*?: median (\(.*?\)|[0-9.]+)", text, re.M)
        found = {side: value for side, value in medians}
        if "A" in found and "B" in found:
            a, b = (float(found[s].strip("()").split(",")[0]) for s in "AB")
            ratio = b / a if found["A"].startswith("(") else a / b
            print(f"authorizer on with {ACLS} ACLs / off: {ratio:.3f}")
        return status
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
