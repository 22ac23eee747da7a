"""The tools of replicas across log dirs without a broker: log dirs named by path
and by id, the replica fields ``topics describe`` adds, the plan of ``reassign
generate --bootstrap`` and its files, the usage errors (one line, status 2,
nothing sent), and what ``hostbroker top`` reads from real shared tables.

Broker answers are the protocol's own METADATA v2 values, checked as the
decoder checks them; the tables are real shared memory.
"""

from __future__ import annotations

import itertools
import json
import os

import pytest

from hostbroker import top
from hostbroker.client.errors import BrokerError, ConnectionClosedError
from hostbroker.exits import EXIT_USAGE, CommandError
from hostbroker.commands.logdirs import DirNames, LogDir, dir_counts, partition_is_short
from hostbroker.commands.reassign import _reassignment_file, _replace
from hostbroker.commands.topics import _Replicas
from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from hostbroker.protocol.logdirs import (
    DIR_MISSING,
    DIR_OFFLINE,
    DIR_ONLINE,
    MetadataLogDir,
    MetadataPartitionV2,
    MetadataResponseV2,
    MetadataTopicV2,
)
from hostbroker.replication.dirplacement import DirLoad
from hostbroker.shm.logdirs import LD_OFFLINE, LogDirTable
from hostbroker.shm.partitions import (
    OFFLINE,
    ONLINE,
    PLACEMENT_LOG_DIRS,
    ROLE_LEADER,
    PartitionTable,
    isr_bits,
)
from hostbroker.shm.region import broker_prefix, region_name, remove_stale
from tests.integration.cli import hostbroker, one_line_error

DIRS = (MetadataLogDir(1, "/srv/d1", DIR_ONLINE), MetadataLogDir(2, "/srv/d2", DIR_OFFLINE),
        MetadataLogDir(3, None, DIR_MISSING), MetadataLogDir(4, "/srv/d4/", DIR_ONLINE))


def part(p: int, replica_dirs, isr_dirs=None, leader_dir=None, target=(), hw=100):
    isr_dirs = replica_dirs if isr_dirs is None else isr_dirs
    leader_dir = replica_dirs[0] if leader_dir is None else leader_dir
    return MetadataPartitionV2(p, ErrorCode.NONE, 0, 3, (0,), (0,), 0, hw, "/srv/d1",
                               leader_dir, tuple(replica_dirs), tuple(isr_dirs), tuple(target))


def answer(*partitions) -> MetadataResponseV2:
    response = MetadataResponseV2(0, -1, (), (MetadataTopicV2("t", ErrorCode.NONE, partitions),),
                                  DIRS)
    response.check()  # what the client's decoder requires of an answer
    return response


# -- paths and ids ------------------------------------------------------------------


def test_dirs_are_named_by_path_and_a_dir_without_one_as_missing():
    names = DirNames.from_response(answer())
    assert names.name(1) == "/srv/d1" and names.name(4) == "/srv/d4/"
    assert names.name(3) == "missing:3" and names.name(9) == "missing:9"
    assert [d.state for d in names.dirs] == ["online", "offline", "missing", "online"]
    # an operator's path matches whatever its trailing slashes and dots
    assert names.id_of("/srv/d4", "x") == 4 and names.id_of("/srv/d1/./", "x") == 1


def test_a_missing_dir_is_named_by_id_even_where_a_new_disk_took_its_path():
    # a dead disk's id (2) stays in the replication state at its old path; the new
    # disk mounted there got id 5
    names = DirNames([LogDir(1, "/srv/d1", "online"), LogDir(2, "/srv/d2", "missing"),
                      LogDir(5, "/srv/d2", "online")])
    assert names.names([2, 5, 1]) == ["missing:2", "/srv/d2", "/srv/d1"]
    assert names.id_of("/srv/d2", "x") == 5


def test_a_path_the_broker_lacks_or_a_dir_not_online_is_one_line():
    names = DirNames.from_response(answer())
    with pytest.raises(CommandError) as unknown:
        names.id_of("/srv/d9", "t-0")
    assert str(unknown.value) == ("t-0: /srv/d9 is not a log dir of the broker "
                                  "(its log dirs: /srv/d1, /srv/d2, /srv/d4/)")
    assert unknown.value.status == 1
    with pytest.raises(CommandError, match=r"^t-0: log dir /srv/d2 is offline$"):
        names.online_id("/srv/d2", "t-0")
    assert names.online_id("/srv/d4", "t-0") == 4


# -- topics describe ----------------------------------------------------------------


def test_describe_names_replicas_isr_and_leader_by_path():
    replicas = _Replicas(answer(part(0, [1, 4]), part(1, [4, 2], [4]),
                                part(2, [1, 3], [1, 3], leader_dir=-1),
                                part(3, [1, 4], target=(4, 1))))
    row = api.MetadataPartition(0, ErrorCode.NONE, 0, 0, 10, "/srv/d1")
    assert replicas.of("t", row) == {"leader": "/srv/d1", "replicas": ["/srv/d1", "/srv/d4/"],
                                     "isr": ["/srv/d1", "/srv/d4/"], "leader_epoch": 3,
                                     "under_replicated": False}
    short = replicas.of("t", api.MetadataPartition(1, ErrorCode.NONE, 0, 0, 10, "/srv/d4"))
    assert short["isr"] == ["/srv/d4/"] and short["under_replicated"]
    leaderless = replicas.of("t", api.MetadataPartition(2, ErrorCode.NONE, 0, 0, 0, None))
    assert leaderless["leader"] is None and leaderless["under_replicated"]
    assert leaderless["replicas"] == ["/srv/d1", "missing:3"]
    moving = replicas.of("t", api.MetadataPartition(3, ErrorCode.NONE, 0, 0, 0, "/srv/d1"))
    assert moving["target"] == ["/srv/d4/", "/srv/d1"]


def test_without_version_2_a_partition_is_one_replica_in_its_log_dir():
    row = api.MetadataPartition(0, ErrorCode.NONE, 0, 0, 10, "/srv/d1")
    for replicas in (_Replicas(None), _Replicas(answer())):  # no answer; a partition it lacks
        assert replicas.of("t", row) == {"leader": "/srv/d1", "replicas": ["/srv/d1"],
                                         "isr": ["/srv/d1"], "leader_epoch": -1,
                                         "under_replicated": False}


def test_logdirs_list_counts_replicas_leaders_and_short_isrs():
    response = answer(part(0, [1, 4]), part(1, [4, 1], [4]), part(2, [1, 3], [1]))
    assert not partition_is_short(response.topics[0].partitions[0])
    assert dir_counts(response) == {
        1: {"replicas": 3, "leaders": 2, "under_replicated": 1},
        4: {"replicas": 2, "leaders": 1, "under_replicated": 1},
        3: {"replicas": 1, "leaders": 0, "under_replicated": 0}}


# -- reassign --bootstrap -------------------------------------------------------------


LOADS = {1: DirLoad(5, 2, 500, 1), 2: DirLoad(1, 0, 100, 2), 4: DirLoad(0, 0, 0, 4)}


def test_generate_keeps_replicas_on_listed_dirs_and_replaces_the_others_in_place():
    # dir 3 is dead (or being emptied): its replica goes to the least loaded listed dir,
    # in its place, so the preferred leader stays first
    assert _replace([3, 1], [1, 2, 4], 2, LOADS, "t-0") == [4, 1]
    assert _replace([1, 3], [1, 2, 4], 2, LOADS, "t-0") == [1, 4]
    assert _replace([1, 2], [1, 2, 4], 2, LOADS, "t-0") == [1, 2]  # nothing to move
    grown = _replace([1], [1, 2, 4], 3, LOADS, "t-0")
    assert grown[0] == 1 and sorted(grown) == [1, 2, 4]
    assert _replace([1, 2, 4], [1, 2, 4], 2, LOADS, "t-0") == [1, 2]
    assert _replace([1, 2], [2, 4], 2, LOADS, "t-0") == [4, 2]


def test_generate_refuses_more_replicas_than_listed_dirs():
    with pytest.raises(CommandError, match=r"^cannot place t-0: replication factor 2 needs 2 "):
        _replace([3], [1], 2, LOADS, "t-0")


def _file(tmp_path, document) -> str:
    path = tmp_path / "plan.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def test_a_dir_reassignment_file_names_dirs_by_path(tmp_path):
    path = _file(tmp_path, {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "log_dirs": ["/srv/d3/", "/srv/d1"]},
        {"topic": "t", "partition": 1, "log_dirs": ["/srv/d1"]}]})
    assert _reassignment_file(path, "log_dirs") == {("t", 0): ["/srv/d3", "/srv/d1"],
                                                    ("t", 1): ["/srv/d1"]}


@pytest.mark.parametrize("dirs, needle", [
    (["/a", "/a/"], "log_dirs must be distinct log dir paths"),
    ([], "log_dirs must be distinct log dir paths"),
    ([1, 2], "log_dirs must be distinct log dir paths"),
    (["/a\0b"], "log_dirs must be distinct log dir paths"),
    (["/a\nb"], "log_dirs must be distinct log dir paths"),
    (["  "], "log_dirs must be distinct log dir paths"),
    (["/" + "x" * 5000], "log_dirs must be distinct log dir paths"),
    ([f"/d{i}" for i in range(9)], "9 replicas are over the most a partition may have (8)"),
])
def test_a_bad_dir_reassignment_file_is_a_usage_error(tmp_path, dirs, needle):
    path = _file(tmp_path, {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "log_dirs": dirs}]})
    with pytest.raises(CommandError) as refused:
        _reassignment_file(path, "log_dirs")
    assert refused.value.status == EXIT_USAGE and needle in str(refused.value)
    # broker ids where paths belong, and paths where ids belong, are refused too
    ids = _file(tmp_path, {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2]}]})
    with pytest.raises(CommandError, match="log_dirs must be"):
        _reassignment_file(ids, "log_dirs")


# -- the command line: one line, status 2, nothing sent ----------------------------------


@pytest.mark.parametrize("args, line", [
    (("topics", "create", "--topic", "t", "--replication-factor", "9"),
     "hostbroker topics create: --replication-factor must be 1 to 8"),
    (("topics", "create", "--topic", "t", "--replication-factor", "0"),
     "hostbroker topics create: --replication-factor must be 1 to 8"),
    (("reassign", "generate", "--topics-to-move-json-file", "f", "--broker-list", "1"),
     "hostbroker reassign generate: --broker-list does not go with --bootstrap"),
    (("reassign", "generate", "--topics-to-move-json-file", "f"),
     "hostbroker reassign generate: needs --topics-to-move-json-file and --dir-list"),
    (("reassign", "generate", "--topics-to-move-json-file", "f", "--dir-list", ","),
     "hostbroker reassign generate: --dir-list: give distinct log dir paths, comma-separated"),
    (("logdirs", "forget", "--log-dir-id", "0"),
     "hostbroker logdirs forget: --log-dir-id: '0' is not a log dir id (1 to 2147483647)"),
    (("logdirs", "online", "--log-dir", ""),
     "hostbroker logdirs online: --log-dir: give a log dir path"),
])
def test_usage_errors_are_one_line_before_any_connection(tmp_path, args, line):
    # the broker address is a socket nobody listens on: a request sent would be status 1
    nobody = f"unix://{tmp_path}/nobody.sock"
    topics = _file(tmp_path, {"version": 1, "topics": [{"topic": "t"}]})
    args = tuple(topics if a == "f" else a for a in args)
    result = hostbroker(*args, "--bootstrap", nobody, timeout=30)
    assert result.returncode == EXIT_USAGE, result
    assert one_line_error(result) == line


def test_reassign_names_brokers_or_a_broker_and_dir_list_goes_with_bootstrap(tmp_path):
    result = hostbroker("reassign", "generate", "--zookeeper", "127.0.0.1:1",
                        "--topics-to-move-json-file", "f", "--dir-list", "/a", timeout=30)
    assert result.returncode == EXIT_USAGE
    assert one_line_error(result) == ("hostbroker reassign generate: --dir-list does not go "
                                      "with --zookeeper")
    neither = hostbroker("reassign", "verify", "--reassignment-json-file", "f", timeout=30)
    assert neither.returncode == EXIT_USAGE
    assert one_line_error(neither) == ("hostbroker reassign verify: needs --zookeeper (brokers) "
                                       "or --bootstrap (the log dirs of a standalone broker)")


# -- hostbroker top ------------------------------------------------------------------


_runs = itertools.count()


@pytest.fixture
def tables():
    token = f"t{os.getpid()}tools{next(_runs)}"
    made = []

    def create(cls, kind, *args):
        made.append(cls.create(region_name(token, kind, 0), *args))
        return made[-1]

    yield create
    for table in made:
        table.close()
    remove_stale(broker_prefix(token))


def _replica(table, slot, topic, p, owner, replicas, role=None, isr=None, state=ONLINE,
             epoch=1, placement=PLACEMENT_LOG_DIRS):
    table.claim_replica(slot, replicas, leader=-1, leader_epoch=epoch, placement=placement,
                        state=state, name=topic, partition=p, owner=owner)
    if role is not None:
        table.write(slot, role=role, leader=replicas[owner], leader_epoch=epoch,
                    isr=isr_bits(replicas, isr if isr is not None else replicas))


def test_top_finds_under_replicated_and_offline_replicas(tables):
    table = tables(PartitionTable, "partitions", 16)
    dirs = tables(LogDirTable, "logdirs", [1, 2])
    _replica(table, 0, "t", 0, 0, [1, 2], ROLE_LEADER)  # whole ISR
    _replica(table, 1, "t", 0, 1, [1, 2])
    _replica(table, 2, "t", 1, 1, [1, 2], ROLE_LEADER, isr=[2])  # its ISR lacks dir 1
    _replica(table, 3, "t", 1, 0, [1, 2], state=OFFLINE)
    _replica(table, 4, "t", 2, 0, [1, 2])  # no leader at all
    _replica(table, 5, "t", 2, 1, [1, 2])
    # a cluster replica's short ISR is the controller's to report, not top's
    _replica(table, 6, "c", 0, 0, [7, 8], ROLE_LEADER, isr=[7], placement=0)
    table.write(7, state=ONLINE, name="plain", partition=0, owner=1)
    assert top.under_replicated(table) == [["t", 1], ["t", 2]]
    assert top.offline(table, ["/d0", "/d1"], dirs)["offline_partitions"] == [
        {"topic": "t", "partition": 1, "log_dir": "/d0", "replica": "t-1@1"}]

    dirs.set_state(1, LD_OFFLINE)
    dirs.set_counts(0, 3, 1, 0, 1)
    rows = top.log_dir_rows(dirs, ["/d0", "/d1"])
    assert rows == [
        {"id": 1, "path": "/d0", "state": "online", "replicas": 3, "leaders": 1,
         "under_replicated": 0, "offline_replicas": 1},
        {"id": 2, "path": "/d1", "state": "offline", "replicas": 0, "leaders": 0,
         "under_replicated": 0, "offline_replicas": 0}]


def test_top_table_shows_log_dirs_then_what_is_short_then_what_is_offline():
    reading = {"broker_state": "running", "supervisor_pid": 1, "workers": [],
               "log_dirs": [
                   {"id": 1, "path": "/d0", "state": "online", "replicas": 3, "leaders": 2,
                    "under_replicated": 1, "offline_replicas": 0},
                   {"id": 2, "path": "/d1", "state": "offline", "replicas": 3, "leaders": 0,
                    "under_replicated": 0, "offline_replicas": 3}],
               "under_replicated_partitions": [["t", 1]],
               "offline_log_dirs": ["/d1"],
               "offline_partitions": [{"topic": "t", "partition": 1, "log_dir": "/d1",
                                       "replica": "t-1@2"}]}
    lines = top.render(reading, None, 1.0).splitlines()
    assert [line.split() for line in lines[-6:-3]] == [
        ["log", "dir", "id", "state", "replicas", "leaders", "under-replicated"],
        ["/d0", "1", "online", "3", "2", "1"],
        ["/d1", "2", "offline", "3", "0", "0"]]
    assert lines[-3:] == ["UNDER-REPLICATED partition t-1", "OFFLINE log dir /d1",
                          "OFFLINE replica t-1@2 in /d1"]
    # one log dir holds no replicas across dirs: no table
    one = dict(reading, log_dirs=reading["log_dirs"][:1], under_replicated_partitions=[],
               offline_log_dirs=[], offline_partitions=[])
    assert "under-replicated" not in top.render(one, None, 1.0)


class _Client:
    """Stands in for ``topics._client``'s SimpleClient: METADATA v0 answers
    ``v0``; version 2 answers ``v2``, or raises it; no topic configs (an older
    broker)."""

    def __init__(self, v0, v2):
        self.v0, self.v2 = v0, v2

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def metadata(self, topics):
        return self.v0

    def metadata_v2(self, topics):
        if isinstance(self.v2, BaseException):
            raise self.v2
        return self.v2

    def describe_topic_configs(self, topics):
        # a broker from before DESCRIBE_TOPIC_CONFIGS: describe says nothing of configs
        raise BrokerError(ErrorCode.UNSUPPORTED_VERSION, "not served")


def _v0() -> api.MetadataResponse:
    return api.MetadataResponse(0, (), (api.MetadataTopic("t", ErrorCode.NONE, (
        api.MetadataPartition(0, ErrorCode.NONE, 0, 0, 10, "/srv/d1"),)),))


def _describe(monkeypatch, v2, as_json: bool) -> tuple[int, str, str]:
    import io

    from hostbroker.commands import topics

    monkeypatch.setattr(topics, "_client", lambda bootstrap: _Client(_v0(), v2))
    out, err = io.StringIO(), io.StringIO()
    status = topics.describe([], as_json=as_json, bootstrap="unix:///x", out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def test_describe_json_keeps_its_list_of_topics(monkeypatch):
    status, out, err = _describe(monkeypatch, answer(part(0, [1, 4])), True)
    assert (status, err) == (0, "")
    (topic,) = json.loads(out)  # a list, as before version 2
    assert topic["topic"] == "t" and topic["partitions"][0]["replicas"] == ["/srv/d1", "/srv/d4/"]


@pytest.mark.parametrize("failure", [BrokerError(ErrorCode.INVALID_REQUEST),
                                     ConnectionClosedError("closed")])
def test_a_failed_version_2_leaves_a_describe_that_version_0_answers(monkeypatch, failure):
    status, out, err = _describe(monkeypatch, failure, True)
    assert status == 0
    (topic,) = json.loads(out)
    assert topic["partitions"] == [{"partition": 0, "broker": 0, "log_start_offset": 0,
                                    "log_end_offset": 10, "log_dir": "/srv/d1",
                                    "error": "NONE"}]  # no replica keys it cannot know
    assert err.startswith("hostbroker topics describe: replicas not shown: ")
    assert len(err.splitlines()) == 1
    status, out, _ = _describe(monkeypatch, failure, False)
    assert status == 0 and out.splitlines()[0] == "topic: t  partitions: 1"


def test_an_older_broker_without_version_2_is_described_quietly(monkeypatch):
    status, out, err = _describe(monkeypatch, BrokerError(ErrorCode.UNSUPPORTED_VERSION), True)
    assert (status, err) == (0, "")
    (topic,) = json.loads(out)
    assert topic["partitions"][0]["replicas"] == ["/srv/d1"]


def test_top_says_why_it_cannot_read_the_log_dir_table(tmp_path, capsys):
    from hostbroker.config import Config
    from hostbroker.shm.region import SharedRegion
    from hostbroker.workers.plan import BrokerPlan

    config = Config.build({"log.dirs": f"{tmp_path}/a,{tmp_path}/b", "broker.id": 91})
    assert top.attach_log_dirs(config) is None  # no broker: no table, nothing said
    assert capsys.readouterr().err == ""
    name = BrokerPlan.from_config(config).logdirs_name
    region = SharedRegion.create(name, 4096)  # not a log dir table
    try:
        assert top.attach_log_dirs(config) is None
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("hostbroker top: log dirs not shown: ")
    finally:
        region.close()
        region.unlink()
