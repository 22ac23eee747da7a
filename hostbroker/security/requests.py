"""What each request asks of the authorizer: one table, for every request kind.

Owns: :func:`needs`, which names for a decoded request the checks it takes
(Kafka's table for these requests; docs/security.md holds it for people):

- ``whole``: checks the request cannot be answered without; one refused
  refuses the request whole, with :func:`refusal_code` of its resource type;
- ``each``: one check per topic (or group) the request names; a refused one
  is answered with its error in its place (a PRODUCE's partition, a
  METADATA's topic), the others as if it were not there;
- ``listed``: the answer lists resources of this type (METADATA of every
  topic, LIST_GROUPS): the broker leaves out those the principal may not
  DESCRIBE, and answers as if they did not exist;
- ``create``: CREATE_TOPIC (and METADATA's auto-create) may go by CREATE on
  the cluster, or else CREATE on the topic itself.

Every request class the broker decodes has an entry (a test holds it to the
protocol's tables), so a new request kind cannot reach a handler without
somebody deciding what it needs. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses

from hostbroker.errors import ErrorCode
from hostbroker.protocol import acls, bodies, controller_requests, groups, logdirs, replication
from hostbroker.protocol import throttled, topics_admin
from hostbroker.security.acl import CLUSTER_NAME, Operation, ResourceType

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
READ, WRITE, CREATE = Operation.READ, Operation.WRITE, Operation.CREATE
DELETE, ALTER, DESCRIBE = Operation.DELETE, Operation.ALTER, Operation.DESCRIBE
CLUSTER_ACTION = Operation.CLUSTER_ACTION


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    operation: Operation
    resource_type: ResourceType
    name: str = CLUSTER_NAME


@dataclasses.dataclass(frozen=True, slots=True)
class Needs:
    whole: tuple[Check, ...] = ()
    each: tuple[Check, ...] = ()
    listed: ResourceType | None = None
    create: str | None = None  # the topic a CREATE may be allowed on by name


def refusal_code(resource_type: ResourceType) -> ErrorCode:
    return {TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
            CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED}[resource_type]


def _topics(operation: Operation, names) -> tuple[Check, ...]:
    return tuple(Check(operation, TOPIC, n) for n in dict.fromkeys(names))


def _cluster(operation: Operation) -> Needs:
    return Needs(whole=(Check(operation, CLUSTER),))


def _metadata(r) -> Needs:
    if not r.topics:
        return Needs(listed=TOPIC)
    return Needs(each=_topics(DESCRIBE, r.topics))


def _fetch_v1(r) -> Needs:
    if r.replica_id >= 0:  # a follower's fetch: brokers only
        return _cluster(CLUSTER_ACTION)
    return Needs(each=_topics(READ, (p.topic for p in r.partitions)))


def _group(operation: Operation, group: str, topic_operation: Operation | None = None,
           topics=()) -> Needs:
    each = _topics(topic_operation, topics) if topic_operation else ()
    return Needs(whole=(Check(operation, GROUP, group),), each=each)


_TABLE = {
    bodies.ProduceRequest: lambda r: Needs(each=_topics(WRITE, (p.topic for p in r.partitions))),
    bodies.FetchRequest: lambda r: Needs(each=_topics(READ, (p.topic for p in r.partitions))),
    replication.FetchRequestV1: _fetch_v1,
    throttled.ProduceRequestV1: lambda r: _TABLE[bodies.ProduceRequest](r),
    throttled.FetchRequestV2: lambda r: _TABLE[bodies.FetchRequest](r),
    bodies.OffsetsRequest: lambda r: Needs(each=_topics(DESCRIBE, (r.topic,))),
    bodies.MetadataRequest: _metadata,
    replication.MetadataRequestV1: _metadata,
    logdirs.MetadataRequestV2: _metadata,
    bodies.CreateTopicRequest: lambda r: Needs(create=r.topic),
    logdirs.CreateTopicRequestV1: lambda r: Needs(create=r.topic),
    bodies.DeleteTopicRequest: lambda r: Needs(whole=(Check(DELETE, TOPIC, r.topic),)),
    topics_admin.AlterTopicRequest: lambda r: Needs(whole=(Check(ALTER, TOPIC, r.topic),)),
    topics_admin.DescribeTopicConfigsRequest:
        lambda r: Needs(each=_topics(DESCRIBE, r.topics)) if r.topics else Needs(listed=TOPIC),
    bodies.OffsetCommitRequest:
        lambda r: _group(READ, r.group, READ, (p.topic for p in r.partitions)),
    groups.OffsetCommitRequestV1:
        lambda r: _group(READ, r.group, READ, (p.topic for p in r.partitions)),
    bodies.OffsetFetchRequest:
        lambda r: _group(DESCRIBE, r.group, DESCRIBE, (p.topic for p in r.partitions)),
    groups.JoinGroupRequest: lambda r: _group(READ, r.group, DESCRIBE,
                                              (t.topic for t in r.topics)),
    groups.SyncGroupRequest: lambda r: _group(READ, r.group),
    groups.HeartbeatRequest: lambda r: _group(READ, r.group),
    groups.LeaveGroupRequest: lambda r: _group(READ, r.group),
    groups.DescribeGroupRequest: lambda r: _group(DESCRIBE, r.group),
    groups.ListGroupsRequest: lambda r: Needs(listed=GROUP),
    topics_admin.ListOffsetGroupsRequest:
        lambda r: Needs(each=tuple(Check(DESCRIBE, GROUP, g) for g in r.groups))
        if r.groups else Needs(listed=GROUP),
    controller_requests.LeaderAndIsrRequest: lambda r: _cluster(CLUSTER_ACTION),
    controller_requests.LeaderAndIsrRequestV1: lambda r: _cluster(CLUSTER_ACTION),
    controller_requests.StopReplicaRequest: lambda r: _cluster(CLUSTER_ACTION),
    replication.OffsetForLeaderEpochRequest: lambda r: _cluster(CLUSTER_ACTION),
    logdirs.AlterReplicaDirsRequest: lambda r: _cluster(ALTER),
    logdirs.LogDirAdminRequest: lambda r: _cluster(ALTER),
    acls.CreateAclsRequest: lambda r: _cluster(ALTER),
    acls.DeleteAclsRequest: lambda r: _cluster(ALTER),
    acls.AlterQuotasRequest: lambda r: _cluster(ALTER),
    acls.DescribeAclsRequest: lambda r: _cluster(DESCRIBE),
    acls.DescribeQuotasRequest: lambda r: _cluster(DESCRIBE),
    acls.WhoamiRequest: lambda r: Needs(),
}


def needs(request) -> Needs:
    """What ``request`` (a decoded request body) asks of the authorizer.
    KeyError for a request class without an entry: a bug, never answered."""
    return _TABLE[type(request)](request)


def request_classes() -> frozenset[type]:
    return frozenset(_TABLE)


def start_warnings(config, broker_principal: str | None = None) -> list[str]:
    """The lines a broker says once at start about what its access control
    cannot do as configured (docs/security.md, "Threat model"): none with
    ``authorizer.enable`` off. ``config``: a :class:`hostbroker.config.Config`;
    ``broker_principal``: who the other brokers see this one as over TLS
    (``security.inter.broker.protocol`` SSL: ``User:<CN>`` of its
    certificate), None over plain TCP."""
    if not config["authorizer.enable"]:
        return []
    lines = []
    if config["zookeeper.connect"] and broker_principal is None:
        lines.append(
            "authorizer.enable in cluster mode: the other brokers reach this one over "
            "tcp:// as User:ANONYMOUS from their address, and their follower FETCHes, "
            "LEADER_AND_ISR and STOP_REPLICA need ClusterAction on the cluster: grant it to "
            "User:ANONYMOUS with --allow-host of each broker (then any user of those hosts "
            "connecting over TCP has it too; docs/security.md), or set "
            "security.inter.broker.protocol SSL, or replication stops")
    elif config["zookeeper.connect"]:
        from hostbroker.security.authorizer import parse_super_users
        from hostbroker.security.principals import Principal

        if Principal.parse(broker_principal) not in parse_super_users(config["super.users"]):
            lines.append(
                f"authorizer.enable in cluster mode: this broker reaches the others over "
                f"ssl:// as {broker_principal} (the CN of its certificate), which is not in "
                f"super.users: unless the ACLs grant it ClusterAction on the cluster (and "
                f"Describe on the replicated topics; not looked at here), the others refuse "
                f"its follower FETCHes, LEADER_AND_ISR and STOP_REPLICA and replication "
                f"stops: name every broker's principal in super.users or grant it that")
    if config.http_listeners and not any(uri.startswith("unix://")
                                         for uri in config.listeners):
        # (with ssl:// listeners alone it shows the broker's certificate, and says
        # at start whom it acts as: hostbroker.workers.http.context)
        if any(uri.startswith("tcp://") for uri in config.listeners):
            lines.append(
                "authorizer.enable with hb-http and no unix:// listener: hb-http reaches the "
                "broker over TCP as User:ANONYMOUS, so its pages show and its console may "
                "change only what the ACLs grant User:ANONYMOUS; add a unix:// listener for "
                "it to act as the broker's own user")
    return lines
