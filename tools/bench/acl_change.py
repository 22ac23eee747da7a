#!/usr/bin/env python3
"""How long one ACL change holds a standalone broker's admin lock when it
keeps many ACLs (hostbroker/workers/handler_acls.py, ``_change``), and how
long a client waits for it.

Run by hand (not a test), from the repository with its venv::

    .venv/bin/python tools/bench/acl_change.py --acls 99990 --changes 6
    .venv/bin/python tools/bench/acl_change.py --baseline /path/of/another/checkout

An ``acls.json`` of ``--acls`` bindings (literal topics, one each, principals
of 997 users) in a log dir, published in shared memory as a broker's
supervisor publishes it at start. ``lock``: the handler's change code itself
(its ``_change``, all of which runs under the admin lock) in a process of its
own, ``--changes`` changes one after another, alternately adding one binding
and removing it, each timed from the lock taken to the lock given back. ``answer``: a broker (``hostbroker serve``,
authorizer on, one handler) started on such a file, and a client over its Unix
socket (the broker's own user) making the same changes, each answer timed
(this adds the handler's own reading of each new generation: its authorizer
made again, the index DELETE_ACLS uses). The first change of a handler makes
the encoding it keeps (hostbroker/security/store.py, ``AclEncoding``); the
ones after cost what they change. With ``--baseline`` (a checkout of another
commit of the project) the same is measured on that code first, in the same
run, and the medians after the first change are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from hostbroker.protocol import acls as w  # noqa: E402
from hostbroker.security.acl import (AclBinding, Operation, PatternType,  # noqa: E402
                                     Permission, ResourceType)
from hostbroker.security.principals import Principal  # noqa: E402
from hostbroker.security.store import write_acls  # noqa: E402
from tests.integration.broker import Broker  # noqa: E402

TOPIC, LITERAL, READ, ALLOW = 2, 3, 3, 3

# run in a process of its own on the code of one checkout: prints the seconds
# each change of the handler's _change held the lock
LOCK_DRIVER = """
import json, os, sys, time, types
from hostbroker.config import Config
from hostbroker.security.acl import (AclBinding, Operation, PatternType, Permission,
                                     ResourceType)
from hostbroker.security.principals import Principal
from hostbroker.shm.published import PublishedDocument
from hostbroker.workers.access import AccessView, publish_at_start
from hostbroker.workers.handler_acls import AccessAdmin

log_dir, changes = sys.argv[1], int(sys.argv[2])
config = Config.build(overrides=["authorizer.enable=true", f"log.dirs={log_dir}"])
name = f"/hb-bench-aclchange-{os.getpid()}"
region = publish_at_start(name, log_dir, config)


class Lock:  # (one process: nobody else takes it); times how long it is held
    held = []

    def acquire(self):
        self.taken = time.monotonic()

    def release(self):
        self.held.append(time.monotonic() - self.taken)


class Handler(AccessAdmin):
    pass


h = Handler()
h.config, h.lock = config, Lock()
h.plan = types.SimpleNamespace(log_dirs=[log_dir], access_name=name)
h.access = AccessView(PublishedDocument.attach(name, True), enabled=True,
                      max_bindings=config["acl.max.bindings"])
new = AclBinding.checked(ResourceType.TOPIC, "bench-new", PatternType.LITERAL,
                         Principal.parse("User:bench"), "*", Operation.READ, Permission.ALLOW)
try:
    for i in range(changes):
        h.access.snapshot()  # (the handler's loop reads each generation before a request)
        if i % 2 == 0:
            h._change(change_acls=lambda held: held | {new})
        else:
            h._change(change_acls=lambda held: held - {new})
finally:
    region.close()
    region.unlink()
print(json.dumps(Lock.held))
"""


def acls_dir(count: int) -> str:
    root = tempfile.mkdtemp(prefix="hb-bench-aclchange-")
    os.makedirs(os.path.join(root, "logs"))
    write_acls(os.path.join(root, "logs"), [
        AclBinding.checked(ResourceType.TOPIC, f"topic-{i:06d}", PatternType.LITERAL,
                           Principal.parse(f"User:u{i % 997}"), "*", Operation.READ,
                           Permission.ALLOW) for i in range(count)])
    return root


def lock_of(tree: str, count: int, rounds: int) -> list[float]:
    """Seconds each change held the lock, on the code of ``tree``."""
    root = acls_dir(count)
    try:
        done = subprocess.run([sys.executable, "-c", LOCK_DRIVER, os.path.join(root, "logs"),
                               str(rounds)], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": tree}, check=True,
                              cwd=root)  # (not this checkout's directory: its code first)
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def changes_of(tree: str, count: int, rounds: int) -> list[float]:
    """Seconds of each change's answer on a broker of ``tree``."""
    root = acls_dir(count)
    broker = Broker(root, authorizer_enable="true", num_handlers=1)
    broker.env = {"PYTHONPATH": tree}
    took = []
    try:
        broker.start(timeout=120)
        entry = w.AclEntry(TOPIC, "bench-new", LITERAL, "User:bench", "*", READ, ALLOW)
        with broker.client(broker.unix, timeout=60) as client:
            for i in range(rounds):
                t = time.monotonic()
                if i % 2 == 0:
                    answer = client.request(w.CreateAclsRequest((entry,)))
                    assert answer.results[0].error_code == 0, answer
                else:
                    answer = client.request(w.DeleteAclsRequest((w.AclFilterEntry(
                        resource_type=TOPIC, resource_name="bench-new", pattern_type=LITERAL,
                        principal="User:bench"),)))
                    assert answer.results[0].error_code == 0, answer
                took.append(time.monotonic() - t)
    finally:
        broker.finish()
        shutil.rmtree(root, ignore_errors=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acls", type=int, default=99_990)
    parser.add_argument("--changes", type=int, default=6)
    parser.add_argument("--baseline", help="a checkout of another commit, measured first")
    args = parser.parse_args()
    trees = ([("baseline", os.path.abspath(args.baseline))] if args.baseline else []) + \
        [("this", ROOT)]
    medians = {}
    for what, measure in (("lock", lock_of), ("answer", changes_of)):
        for name, tree in trees:
            took = measure(tree, args.acls, args.changes)
            medians[what, name] = statistics.median(took[1:])  # (the first: the encoding made)
            print(f"{what:6} {name:8} " + " ".join(f"{t * 1000:6.0f}" for t in took)
                  + f"  ms; median after the first {medians[what, name] * 1000:.0f} ms",
                  flush=True)
        if args.baseline:
            print(f"{what:6} baseline / this (medians after the first): "
                  f"{medians[what, 'baseline'] / medians[what, 'this']:.1f}", flush=True)

if __name__ == "__main__":
    main()
