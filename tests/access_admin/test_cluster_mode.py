"""In cluster mode the ACLs and quotas are ZooKeeper's: a broker refuses every
access control admin request in its place, pointing at ``--zookeeper``, and
writes no file (a real broker on a real ZooKeeper)."""

from __future__ import annotations

import os

from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls as w
from tests.access_admin.support import acl_file, alter, create, delete, describe, entry, quota_file
from tests.cluster.conftest import zookeeper  # noqa: F401 - fixture
from tests.integration.cli import hostbroker


def test_cluster_mode_refuses_the_admin_requests(make_broker, zookeeper):  # noqa: F811
    broker = make_broker(**{"zookeeper.connect": zookeeper.connect, "broker.id": 1})
    with broker.client() as c:
        (code, message), = create(c, entry("t"))
        assert code == ErrorCode.INVALID_REQUEST and "--zookeeper" in message
        (result,) = delete(c, w.AclFilterEntry()).results
        assert result.error_code == ErrorCode.INVALID_REQUEST and "--zookeeper" in \
            result.error_message
        answer = describe(c)
        assert answer.error_code == ErrorCode.INVALID_REQUEST and "--zookeeper" in \
            answer.error_message
        (code, message), = alter(c, ("User:a", {"request_rate": 1}))
        assert code == ErrorCode.INVALID_REQUEST and "--zookeeper" in message
        assert c.request(w.DescribeQuotasRequest()).error_code == ErrorCode.INVALID_REQUEST
    assert not os.path.exists(acl_file(broker)) and not os.path.exists(quota_file(broker))
    done = hostbroker("acls", "add", "--bootstrap", broker.unix, "--allow-principal", "User:a",
                      "--operation", "Read", "--topic", "t")
    assert done.returncode == 1
    line = done.stderr.decode()
    assert line.count("\n") == 1 and "--zookeeper" in line


def test_a_cluster_refusal_of_many_entries_fits_the_least_answer(make_broker,
                                                                 zookeeper):  # noqa: F811
    broker = make_broker(**{"zookeeper.connect": zookeeper.connect, "broker.id": 1,
                            "response.max.bytes": 65536})
    with broker.client() as c:
        results = create(c, *[entry("t")] * 10_000)
        assert {code for code, _ in results} == {ErrorCode.INVALID_REQUEST}
        assert "--zookeeper" in results[0][1] and results[1][1] is None
        # (8 bytes a filter at least: 8,000 filters is what 65,536 bytes can answer)
        answer = delete(c, *[w.AclFilterEntry()] * 7_000)
        assert len(answer.results) == 7_000
        assert answer.results[0].error_message and answer.results[-1].error_message is None
