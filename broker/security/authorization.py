"""Which ACL each API needs (Kafka's authorization table), checked before the handler runs.

APIs about one group, one transactional id or the cluster are checked here, and a refusal is their
response with only the error code set. APIs about several resources check each in their handler
(CHECKED_IN_HANDLER). Any other API is left to super users: for everyone else it closes the connection
with a log line, so an API whose checks are missing can never serve what an ACL would forbid.
"""

from __future__ import annotations

from ..errors import ErrorCode
from .authorizer import CLUSTER, CLUSTER_NAME, GROUP, TOPIC, TRANSACTIONAL_ID

_GROUP_READ = ("Read", GROUP, "group_id", ErrorCode.GROUP_AUTHORIZATION_FAILED)
_TXN_WRITE = ("Write", TRANSACTIONAL_ID, "transactional_id", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _cluster(operation: str) -> tuple:
    return operation, CLUSTER, None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# API: the checks, in order: (operation, resource type, request field naming the resource, error code)
WHOLE_REQUEST = {
    "JoinGroup": [_GROUP_READ],
    "SyncGroup": [_GROUP_READ],
    "Heartbeat": [_GROUP_READ],
    "LeaveGroup": [_GROUP_READ],
    "ConsumerGroupHeartbeat": [_GROUP_READ],
    "AddOffsetsToTxn": [_TXN_WRITE, _GROUP_READ],
    "EndTxn": [_TXN_WRITE],
    "DescribeClientQuotas": [_cluster("DescribeConfigs")],
    "AlterClientQuotas": [_cluster("AlterConfigs")],
    # the share coordinator's inter-broker APIs (KIP-932)
    "ReadShareGroupState": [_cluster("ClusterAction")],
    "WriteShareGroupState": [_cluster("ClusterAction")],
    "DeleteShareGroupState": [_cluster("ClusterAction")],
    "InitializeShareGroupState": [_cluster("ClusterAction")],
    "ReadShareGroupStateSummary": [_cluster("ClusterAction")],
}
CHECKED_IN_HANDLER = frozenset({
    "ApiVersions", "SaslHandshake", "SaslAuthenticate", "Metadata", "Produce", "Fetch", "ListOffsets",
    "OffsetCommit", "OffsetFetch", "TxnOffsetCommit", "AddPartitionsToTxn", "InitProducerId", "CreateTopics",
    "DeleteTopics", "DescribeGroups", "ListGroups", "FindCoordinator", "CreateAcls", "DescribeAcls", "DeleteAcls",
    "AlterUserScramCredentials", "DescribeUserScramCredentials", "DescribeCluster", "DescribeTopicPartitions", "DescribeConfigs",
    "AlterConfigs", "IncrementalAlterConfigs", "CreatePartitions", "DeleteGroups", "DescribeProducers",
    "DescribeTransactions", "ListTransactions", "OffsetForLeaderEpoch", "DeleteRecords", "OffsetDelete",
    "DescribeLogDirs", "ElectLeaders", "AlterPartitionReassignments", "ListPartitionReassignments", "WriteTxnMarkers",
    "ConsumerGroupDescribe",
    # share groups (KIP-932): a group's Read or Describe and each topic's Read or Describe
    "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge", "DescribeShareGroupOffsets",
    "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
})
CLOSE = object()

# DescribeConfigs / AlterConfigs resource types: the ACL resource and the error of a refusal
_CONFIG_RESOURCES = {2: (TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),  # TOPIC
                     4: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # BROKER
                     8: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # BROKER_LOGGER
                     32: (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED)}  # GROUP


def config_refusal(authorizer, header, operation: str, resource_type: int, name: str) -> int | None:
    """The error of a DescribeConfigs/AlterConfigs resource the principal may not touch, else None."""
    acl_type, error = _CONFIG_RESOURCES.get(resource_type, (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    allowed = authorizer.authorize(header, operation, acl_type, CLUSTER_NAME if acl_type == CLUSTER else name)
    return None if allowed else error


def gate(authorizer, api: str, request: dict, header):
    """None to go ahead; a response dict that refuses the request; or CLOSE."""
    if api in CHECKED_IN_HANDLER:
        return None
    checks = WHOLE_REQUEST.get(api)
    if checks is None:
        return None if authorizer.is_super_user(header) else CLOSE
    for operation, resource_type, field, error in checks:
        name = CLUSTER_NAME if field is None else request[field]
        if not authorizer.authorize(header, operation, resource_type, name):
            return {"error_code": error}
    return None
