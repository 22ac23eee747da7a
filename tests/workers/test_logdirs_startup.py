"""The supervisor's start-up step for log dir ids: ids kept, new dirs given ids
above every id the newest state file names, refusals in one line."""

import os

import pytest

from hostbroker.config import Config
from hostbroker.log.dirids import read_dir_id, write_dir_id
from hostbroker.workers.logdirs.model import Document, Part
from hostbroker.workers.logdirs.statefile import STATE_FILE
from hostbroker.workers.plan import BrokerPlan
from hostbroker.workers.startup import StartError, resolve_dir_ids


def plan_of(dirs, **settings) -> BrokerPlan:
    overrides = {"log.dirs": ",".join(str(d) for d in dirs), **settings}
    return BrokerPlan.from_config(Config.build(overrides=[f"{k}={v}" for k, v in
                                                          overrides.items()]))


def make(tmp_path, n):
    dirs = [tmp_path / f"d{i}" for i in range(n)]
    for d in dirs:
        d.mkdir()
    return dirs


def test_ids_are_kept_and_a_new_dir_never_takes_a_dead_dir_s_id(tmp_path):
    a, b, c = make(tmp_path, 3)
    write_dir_id(str(a), 2)
    # the newest state file names dir 7, dead now
    doc = Document(seq=3, online=[2, 7], dirs={2: str(a), 7: "/gone"}, configs={"t": {}},
                   parts={("t", 0): Part([2, 7], 2, 0, [2])})
    (a / STATE_FILE).write_bytes(doc.encode())
    plan = plan_of([a, b, c])
    resolve_dir_ids(plan)
    assert plan.dir_ids == [2, 8, 9]
    assert [read_dir_id(str(d)) for d in (a, b, c)] == [2, 8, 9]
    again = plan_of([c, a, b])  # reordered: the ids go with the dirs
    resolve_dir_ids(again)
    assert again.dir_ids == [9, 2, 8]


def test_a_bad_id_file_starts_that_dir_offline(tmp_path, capsys):
    a, b = make(tmp_path, 2)
    os.mkdir(b / "log-dir-id")
    plan = plan_of([a, b])
    resolve_dir_ids(plan)
    assert plan.dir_ids == [1, -1]
    assert "starts offline" in capsys.readouterr().err


def test_refusals(tmp_path):
    a, b = make(tmp_path, 2)
    with pytest.raises(StartError) as e:
        resolve_dir_ids(plan_of([a, b], **{"default.replication.factor": 3}))
    assert str(e.value) == "default.replication.factor 3 needs 3 log.dirs; 2 are configured"
    write_dir_id(str(a), 5)
    write_dir_id(str(b), 5)
    with pytest.raises(StartError) as e:
        resolve_dir_ids(plan_of([a, b]))
    assert str(e.value) == f"log.dirs: {a} and {b} both hold log dir id 5 (a copied dir?)"


@pytest.mark.parametrize("n, settings", [(1, {}), (2, {"zookeeper.connect": "127.0.0.1:2181"})],
                         ids=["one dir", "cluster"])
def test_without_hb_logdirs_no_id_file_is_read_or_written(tmp_path, capsys, n, settings):
    dirs = make(tmp_path, n)
    os.mkdir(dirs[0] / "log-dir-id")  # bad: would start the dir offline with hb-logdirs
    plan = plan_of(dirs, **settings)
    assert not plan.logdirs
    resolve_dir_ids(plan)
    assert plan.dir_ids == [-1] * n
    assert capsys.readouterr().err == ""
    assert all(not (d / "log-dir-id").is_file() for d in dirs)


def test_the_devices_are_taken_at_the_start(tmp_path):
    a, b = make(tmp_path, 2)
    plan = plan_of([a, b])
    resolve_dir_ids(plan)
    assert plan.dir_devices == [os.stat(a).st_dev, os.stat(b).st_dev]
