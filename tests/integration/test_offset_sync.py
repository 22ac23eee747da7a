"""OFFSET_COMMIT synced off the coordinator's loop (hostbroker/workers/coordinator/offsets.py).

A commit is answered once the fdatasync that began after its write returned,
and only then does OFFSET_FETCH read it; a fetch pipelined behind commits on
one connection waits for them, so it reads what was committed before it.
Commits of many connections at once share syncs, and every one answered is
found again after the broker is killed and started.
"""

from __future__ import annotations

import threading

from hostbroker.client.connection import BrokerConnection
from hostbroker.errors import ErrorCode
from hostbroker.protocol import api
from tests.integration.wire_helpers import RawSocket, new_topic


def _commit(group: str, topic: str, partition: int, offset: int) -> api.OffsetCommitRequest:
    return api.OffsetCommitRequest(group, (api.OffsetCommitPartition(topic, partition, offset,
                                                                     f"m{offset}"),))


def test_a_fetch_pipelined_behind_commits_reads_them(broker):
    topic, group = new_topic(), new_topic("group")
    with broker.client() as client:
        client.create_topic(topic, 2)
    for round_, uri in enumerate([broker.tcp, broker.unix] * 10):
        first, second = 10 * round_, 10 * round_ + 5
        frames = [api.encode_request(_commit(group, topic, 0, first), 1),
                  api.encode_request(_commit(group, topic, 1, second), 2),
                  api.encode_request(api.OffsetFetchRequest(group, (
                      api.OffsetFetchPartition(topic, 0), api.OffsetFetchPartition(topic, 1))), 3)]
        with RawSocket(uri) as raw:
            raw.send(b"".join(frames))
            committed = [raw.read_response(api.ApiKey.OFFSET_COMMIT) for _ in range(2)]
            cid, fetched = raw.read_response(api.ApiKey.OFFSET_FETCH)
        assert [c for c, _ in committed] == [1, 2] and cid == 3
        assert all(r.partitions[0].error_code == ErrorCode.NONE for _, r in committed)
        assert [(p.offset, p.metadata) for p in fetched.partitions] == [
            (first, f"m{first}"), (second, f"m{second}")], round_


def test_commits_of_many_connections_are_all_kept(make_broker, tmp_path):
    broker = make_broker()
    topic, group = new_topic(), new_topic("group")
    with broker.client() as client:
        client.create_topic(topic, 8)
    codes: list[int] = []

    def committer(partition: int) -> None:
        with BrokerConnection((broker.tcp, broker.unix)[partition % 2]) as conn:
            sent = [conn.send(_commit(group, topic, partition, offset))
                    for offset in range(1, 51)]
            codes.extend(conn.receive(api.ApiKey.OFFSET_COMMIT).partitions[0].error_code
                         for _ in sent)

    threads = [threading.Thread(target=committer, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert codes == [ErrorCode.NONE] * 400
    expected = [(50, "m50")] * 8
    with broker.client() as client:
        assert [(r.offset, r.metadata) for r in client.offset_fetch(
            group, [(topic, p) for p in range(8)])] == expected
    broker.kill_tree()
    broker = make_broker(root=tmp_path)
    with broker.client() as client:
        assert [(r.offset, r.metadata) for r in client.offset_fetch(
            group, [(topic, p) for p in range(8)])] == expected
