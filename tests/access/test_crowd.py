"""A Unix peer in more groups than an identity carries (256) is refused
everything on every route: its handler is told no identity, and the
processor's own routes (METADATA answered there, direct FETCH, lone PRODUCE
PUT) take none of its requests, so they do not serve it either."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys

import pytest

from hostbroker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from hostbroker.security.principals import Principal
from tests.access.conftest import ROOT_DIR, AccessBroker, run_as

FRAME_NO = "frame:NOT_AUTHORIZED"


@pytest.fixture(scope="module")
def broker(users, tmp_path_factory):
    everything = AclBinding.checked(ResourceType.TOPIC, "t", PatternType.LITERAL,
                                    Principal.parse("User:hbbob"), "*", Operation.ALL,
                                    Permission.ALLOW)
    b = AccessBroker(tmp_path_factory.mktemp("crowd"), [everything],
                     processor_local_requests="true", processor_direct_produce="true",
                     processor_local_fetch="true")
    b.start()
    try:
        assert run_as(None, b.unix, [{"op": "create", "topic": "t"}]) == ["NONE"]
        yield b
    finally:
        b.finish()


def as_bob(uri: str, actions: list, groups: int) -> list:
    """``actions`` as hbbob in the socket's group and ``groups`` - 1 others."""
    entry = pwd.getpwnam("hbbob")
    gids = [grp.getgrnam("hbclients").gr_gid, *range(700_000, 700_000 + groups - 1)]
    done = subprocess.run(
        ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
         "--groups=" + ",".join(map(str, gids)),
         sys.executable, "-m", "tests.access.actions", uri, json.dumps(actions)],
        capture_output=True, text=True, timeout=120, cwd="/",
        env={**os.environ, "PYTHONPATH": ROOT_DIR, "HOME": "/"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


ACTIONS = [{"op": "metadata", "topics": ["t"]}, {"op": "produce", "topic": "t"},
           {"op": "fetch", "topic": "t"}, {"op": "whoami"}]


def test_a_crowd_is_refused_on_every_route(broker):
    # 200 groups: served, on the same routes
    served = as_bob(broker.unix, ACTIONS, 200)
    assert served[:3] == [{"t": "NONE"}, ["NONE"], ["NONE"]]
    assert served[3][0] == "User:hbbob" and len(served[3][1]) == 201  # (and its gid)
    assert as_bob(broker.unix, ACTIONS, 300) == [FRAME_NO] * 4
