"""DescribeUserScramCredentials: which SCRAM mechanisms (and iteration counts) each user has."""

from collections import Counter

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.scram_credentials import MECHANISMS

API = Api("DescribeUserScramCredentials", (0, 0), acl=IN_HANDLER)


def handle(broker, request, header) -> dict:
    if not broker.authorizer.authorize_cluster(header, "Describe"):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": None, "results": []}
    users = broker.scram_credentials.users()
    asked = [u["name"] for u in request["users"] or []] or sorted(users)
    counts = Counter(asked)
    results = []
    for name in dict.fromkeys(asked):
        result = {"user": name, "error_code": ErrorCode.NONE, "error_message": None, "credential_infos": []}
        if counts[name] > 1:
            result.update(error_code=ErrorCode.DUPLICATE_RESOURCE, error_message="Cannot describe the same user twice")
        elif name not in users:
            result.update(error_code=ErrorCode.RESOURCE_NOT_FOUND,
                          error_message="Attempt to describe a user credential that does not exist")
        else:
            result["credential_infos"] = [{"mechanism": MECHANISMS[m][0], "iterations": i}
                                          for m, i in sorted(users[name].items())]
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}
