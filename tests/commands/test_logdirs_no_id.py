"""Log dirs without an id (-1: every dir of a one-dir or cluster broker) in
METADATA version 2 and the tools that read it: listed, online or offline,
never a place to name a replica (docs/spec/protocol.md, METADATA v2)."""

from __future__ import annotations

import pytest

from hostbroker.exits import CommandError
from hostbroker.commands.logdirs import DirNames, dir_counts
from hostbroker.errors import ErrorCode, ProtocolError
from hostbroker.protocol import api
from hostbroker.protocol import logdirs as ld


def answer(log_dirs, partitions=()) -> ld.MetadataResponseV2:
    return ld.MetadataResponseV2(0, -1, (), (ld.MetadataTopicV2("t", ErrorCode.NONE,
                                                                 tuple(partitions)),),
                                 tuple(log_dirs))


def plain(p: int, log_dir: str, leader: int = 0) -> ld.MetadataPartitionV2:
    """A partition of a dir without an id: no dir lists."""
    return ld.MetadataPartitionV2(p, ErrorCode.NONE, leader, 0, (0,), (0,), 0, 5, log_dir,
                                  -1, (), (), ())


def decoded(response: ld.MetadataResponseV2) -> ld.MetadataResponseV2:
    frame = api.encode_response(1, response)[4:]
    return ld.decode_response(frame, ld.MetadataResponseV2)[1]


def test_dirs_without_an_id_decode_online_or_offline_once_each_path():
    sent = answer([ld.MetadataLogDir(-1, "/a", ld.DIR_ONLINE),
                   ld.MetadataLogDir(-1, "/b", ld.DIR_OFFLINE)], [plain(0, "/a")])
    assert decoded(sent) == sent


@pytest.mark.parametrize("bad", [ld.MetadataLogDir(-1, None, ld.DIR_MISSING),
                                 ld.MetadataLogDir(-1, "/a", ld.DIR_MISSING),
                                 ld.MetadataLogDir(-1, None, ld.DIR_ONLINE),
                                 ld.MetadataLogDir(-2, "/a", ld.DIR_ONLINE)])
def test_a_missing_dir_still_needs_an_id_and_minus_one_is_the_only_none(bad):
    with pytest.raises(ProtocolError):
        decoded(answer([bad]))


def test_logdirs_list_counts_a_dir_without_an_id_by_its_path():
    response = answer([ld.MetadataLogDir(-1, "/a", ld.DIR_ONLINE),
                       ld.MetadataLogDir(-1, "/b", ld.DIR_OFFLINE)],
                      [plain(0, "/a"), plain(1, "/a/"), plain(2, "/b", leader=-1)])
    counts = dir_counts(response)
    assert counts["/a"] == {"replicas": 2, "leaders": 2, "under_replicated": 0}
    assert counts["/b"] == {"replicas": 1, "leaders": 0, "under_replicated": 0}


def test_a_dir_without_an_id_is_listed_but_never_names_a_replica():
    names = DirNames.from_response(answer([ld.MetadataLogDir(3, "/c", ld.DIR_ONLINE),
                                           ld.MetadataLogDir(-1, "/a", ld.DIR_ONLINE),
                                           ld.MetadataLogDir(-1, "/b", ld.DIR_ONLINE)]))
    assert [(d.dir_id, d.path) for d in names.dirs] == [(-1, "/a"), (-1, "/b"), (3, "/c")]
    assert names.name(-1) == "missing:-1" and names.online_id("/c", "x") == 3
    with pytest.raises(CommandError, match=r"^x: log dir /a has no log dir id "):
        names.online_id("/a", "x")
