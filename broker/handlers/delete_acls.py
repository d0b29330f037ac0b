"""DeleteAcls: remove the bindings each filter selects; the store is rewritten before the answer."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.acl_filters import matches
from broker.security.authorization import IN_HANDLER

API = Api("DeleteAcls", (1, 3), acl=IN_HANDLER)


def _matching(acl) -> dict:
    return {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": acl.resource_type,
            "resource_name": acl.resource_name, "pattern_type": acl.pattern_type, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation, "permission_type": acl.permission}


async def handle(broker, request, header) -> dict:
    filters = request["filters"]
    refused = None
    if not broker.authorizer.enabled:
        refused = (ErrorCode.SECURITY_DISABLED, "No authorizer is configured")
    elif not broker.authorizer.authorize_cluster(header, "Alter"):
        refused = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if refused:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": refused[0], "error_message": refused[1], "matching_acls": []}] * len(filters)}
    results, doomed = [], set()
    for f in filters:
        selected = [acl for acl in broker.authorizer.acls if matches(f, acl)]
        doomed.update(selected)
        results.append({"error_code": ErrorCode.NONE, "error_message": None,
                        "matching_acls": [_matching(acl) for acl in selected]})
    if doomed:
        await broker.authorizer.remove(doomed)
    return {"throttle_time_ms": 0, "filter_results": results}
