"""Standing cases: what an operator hands the log dir tools (issue 36).

A reassignment file for ``reassign --bootstrap`` and the paths of
``--dir-list`` and ``logdirs online --log-dir`` are read as hostile input:
whatever their bytes, the tool reads them as a plan it can send, or refuses
them in one line with status 2 before any connection; never a traceback,
never a path with a NUL or a line break on the wire. Fifty garbage files from
the suite's seed, and mutations of a good one.
"""

from __future__ import annotations

import json
import random

import pytest

from hostbroker.exits import EXIT_USAGE, CommandError
from hostbroker.commands.logdirs import dir_path
from hostbroker.commands.reassign import _reassignment_file
from tests.integration.cli import hostbroker, one_line_error

GOOD = {"version": 1, "partitions": [{"topic": "t", "partition": 0,
                                      "log_dirs": ["/srv/d3", "/srv/d1"]}]}


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.randrange(-2**40, 2**40)
    if kind == 1:
        return rng.random() * 1e30
    if kind == 2:
        return "".join(chr(rng.choice((0, 10, 13, 47, 46, 65, 0x2028, 0xFFFF, 0x1F600)))
                       for _ in range(rng.randrange(12)))
    if kind == 3:
        return None
    if kind == 4:
        return rng.choice((True, False))
    if kind == 5:
        return "/" + "d" * rng.choice((1, 100, 4097))
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(10))]
    keys = ("topic", "partition", "log_dirs", "replicas", "version", "partitions", "x")
    return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def _mutated(rng: random.Random) -> dict:
    document = json.loads(json.dumps(GOOD))
    entry = document["partitions"][0]
    target, key = rng.choice(((document, "partitions"), (entry, "topic"),
                              (entry, "partition"), (entry, "log_dirs")))
    target[key] = _value(rng)
    return document


def _read(path: str):
    """The plan, or the usage error: nothing else may come out."""
    try:
        plan = _reassignment_file(path, "log_dirs")
    except CommandError as exc:
        assert exc.status == EXIT_USAGE, exc
        assert "\n" not in str(exc)
        return None
    for (topic, partition), dirs in plan.items():
        assert isinstance(topic, str) and type(partition) is int and 0 <= partition < 2**31
        assert 1 <= len(dirs) <= 8 and len(set(dirs)) == len(dirs)
        assert all(isinstance(d, str) and d and "\0" not in d and "\n" not in d for d in dirs)
    return plan


def test_garbage_reassignment_files_are_a_plan_or_one_line(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "plan.json"
    plans = 0
    for round_ in range(50):
        if round_ % 3 == 0:
            path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(200))))
        elif round_ % 3 == 1:
            path.write_text(json.dumps(_mutated(rng)))
        else:
            path.write_text(json.dumps({"version": 1, "partitions": _value(rng)}))
        plans += _read(str(path)) is not None
    assert plans < 50  # the garbage was refused, not taken


def test_a_file_nested_too_deep_or_too_long_is_refused_in_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    long = tmp_path / "long.json"
    with open(long, "w") as f:
        f.write('{"partitions": ["' + "x" * (17 << 20) + '"]}')
    for path, needle in ((deep, "nests JSON too deep"), (long, "is longer than")):
        result = hostbroker("reassign", "execute", "--bootstrap",
                            f"unix://{tmp_path}/nobody.sock", "--reassignment-json-file",
                            str(path), timeout=60)
        assert result.returncode == EXIT_USAGE
        assert needle in one_line_error(result)


@pytest.mark.parametrize("text", ["", " ", "/a\0b", "/a\nb", "/a\rb", "/" + "x" * 4097])
def test_operator_paths_with_control_bytes_never_reach_the_wire(text):
    with pytest.raises(CommandError) as refused:
        dir_path(text, "--log-dir")
    assert refused.value.status == EXIT_USAGE
