"""Which ACL each API needs (Kafka's authorization table), checked before the handler runs.

APIs about one group, one transactional id or the cluster are checked here, and a refusal is their
response with only the error code set. APIs about topics check each topic in their handler (Produce,
Fetch, ListOffsets, Metadata, OffsetCommit, OffsetFetch, TxnOffsetCommit, AddPartitionsToTxn, CreateTopics,
DeleteTopics, DescribeGroups, ListGroups, FindCoordinator, the ACL and SCRAM APIs). Any other API is
left to super users: for everyone else it closes the connection with a log line, so an API whose
checks are missing can never serve what an ACL would forbid.
"""

from __future__ import annotations

from ..errors import ErrorCode
from .authorizer import CLUSTER, CLUSTER_NAME, GROUP, TRANSACTIONAL_ID

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
    "AddOffsetsToTxn": [_TXN_WRITE, _GROUP_READ],
    "EndTxn": [_TXN_WRITE],
    "DescribeCluster": [_cluster("Describe")],
    "DescribeClientQuotas": [_cluster("DescribeConfigs")],
    "AlterClientQuotas": [_cluster("AlterConfigs")],
}
CHECKED_IN_HANDLER = frozenset({
    "ApiVersions", "SaslHandshake", "SaslAuthenticate", "Metadata", "Produce", "Fetch", "ListOffsets",
    "OffsetCommit", "OffsetFetch", "TxnOffsetCommit", "AddPartitionsToTxn", "InitProducerId", "CreateTopics",
    "DeleteTopics", "DescribeGroups", "ListGroups", "FindCoordinator", "CreateAcls", "DescribeAcls", "DeleteAcls",
    "AlterUserScramCredentials", "DescribeUserScramCredentials", "DescribeTopicPartitions",
})
CLOSE = object()


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
