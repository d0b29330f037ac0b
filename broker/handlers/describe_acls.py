"""DescribeAcls: the ACL bindings a filter selects, grouped by resource pattern."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.acl_filters import matches
from broker.security.authorization import IN_HANDLER

API = Api("DescribeAcls", (1, 3), acl=IN_HANDLER)


def handle(broker, request, header) -> dict:
    if not broker.authorizer.enabled:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": "No authorizer is configured", "resources": []}
    if not broker.authorizer.authorize_cluster(header, "Describe"):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.",
                "resources": []}
    resources: dict[tuple, list] = {}
    for acl in sorted(broker.authorizer.acls, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type,
                                                              a.principal, a.host, a.operation, a.permission)):
        if matches(request, acl):
            resources.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                {"principal": acl.principal, "host": acl.host, "operation": acl.operation,
                 "permission_type": acl.permission})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": [
        {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
        for (t, n, p), acls in resources.items()]}
