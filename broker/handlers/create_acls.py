"""CreateAcls: new ACL bindings, written to the ACL store before the answer and in effect at once."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.acl_filters import binding, creation_problem
from broker.security.authorization import IN_HANDLER

API = Api("CreateAcls", (1, 3), acl=IN_HANDLER)


async def handle(broker, request, header) -> dict:
    creations = request["creations"]
    if not broker.authorizer.enabled:
        return {"throttle_time_ms": 0, "results": [
            {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": "No authorizer is configured"}] * len(creations)}
    if not broker.authorizer.authorize_cluster(header, "Alter"):
        return {"throttle_time_ms": 0, "results": [
            {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None}] * len(creations)}
    results, valid = [], []
    for creation in creations:
        problem = creation_problem(creation)
        if problem is None:
            valid.append(binding(creation))
        results.append({"error_code": ErrorCode.INVALID_REQUEST if problem else ErrorCode.NONE,
                        "error_message": problem})
    if valid:
        await broker.authorizer.add(valid)
    return {"throttle_time_ms": 0, "results": results}
