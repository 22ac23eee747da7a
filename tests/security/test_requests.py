"""Every request kind the broker decodes has its authorization decided, and the
table says what Kafka's does."""

import pytest

from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls, bodies, groups, logdirs, replication, topics_admin
from hostbroker.security.acl import CLUSTER_NAME, Operation, ResourceType
from hostbroker.security.requests import Check, Needs, needs, refusal_code, request_classes

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def every_decoded_request_class():
    found = set(bodies.REQUEST_TYPES.values())
    for table in (groups.GROUP_REQUEST_TYPES, logdirs.LOGDIRS_REQUEST_TYPES,
                  replication.REPLICATION_REQUEST_TYPES,
                  topics_admin.TOPICS_ADMIN_REQUEST_TYPES, acls.ACLS_REQUEST_TYPES):
        found.update(table.values())
    return found


def test_every_request_kind_is_in_the_table():
    missing = every_decoded_request_class() - request_classes()
    assert not missing, sorted(c.__name__ for c in missing)


def test_data_requests_are_checked_per_topic_once():
    produce = bodies.ProduceRequest(1, 1000, (bodies.ProducePartition("a", 0, b""),
                                              bodies.ProducePartition("a", 1, b""),
                                              bodies.ProducePartition("b", 0, b"")))
    assert needs(produce) == Needs(each=(Check(Operation.WRITE, T, "a"),
                                         Check(Operation.WRITE, T, "b")))
    fetch = bodies.FetchRequest(100, 1, (bodies.FetchPartition("a", 0, 0, 1024),))
    assert needs(fetch).each == (Check(Operation.READ, T, "a"),)


def test_a_follower_s_fetch_is_a_cluster_action_and_a_consumer_s_a_read():
    part = replication.FetchPartitionV1("a", 0, 0, 0, 1024)
    follower = replication.FetchRequestV1(3, 100, 1, (part,))
    consumer = replication.FetchRequestV1(-1, 100, 1, (part,))
    assert needs(follower).whole == (Check(Operation.CLUSTER_ACTION, C, CLUSTER_NAME),)
    assert needs(consumer).each == (Check(Operation.READ, T, "a"),)


def test_lists_are_filtered_and_named_resources_checked():
    assert needs(bodies.MetadataRequest(())).listed is T
    assert needs(bodies.MetadataRequest(("x",))).each == (Check(Operation.DESCRIBE, T, "x"),)
    assert needs(groups.ListGroupsRequest()).listed is G
    assert needs(topics_admin.ListOffsetGroupsRequest(("g",))).each == (
        Check(Operation.DESCRIBE, G, "g"),)
    assert needs(bodies.CreateTopicRequest("new", 1)).create == "new"


def test_group_requests_need_the_group_and_their_topics():
    commit = bodies.OffsetCommitRequest("g", (bodies.OffsetCommitPartition("t", 0, 5),))
    assert needs(commit) == Needs(whole=(Check(Operation.READ, G, "g"),),
                                  each=(Check(Operation.READ, T, "t"),))
    assert needs(groups.DescribeGroupRequest("g")).whole == (Check(Operation.DESCRIBE, G, "g"),)


@pytest.mark.parametrize("request_, operation", [
    (acls.CreateAclsRequest(()), Operation.ALTER),
    (acls.DescribeAclsRequest(), Operation.DESCRIBE),
    (logdirs.LogDirAdminRequest(0, "/d", -1), Operation.ALTER),
])
def test_administration_needs_the_cluster(request_, operation):
    assert needs(request_).whole == (Check(operation, C, CLUSTER_NAME),)


def test_each_resource_type_has_its_refusal():
    assert [refusal_code(t) for t in (T, G, C)] == [
        ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert needs(acls.WhoamiRequest()) == Needs()
