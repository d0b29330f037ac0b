"""ShareGroupDescribe: epochs, members and their assignments of share groups."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP
from broker.share.coordinator import describe_error

API = Api("ShareGroupDescribe", (1, 1), acl=IN_HANDLER, enabled_by="group.share.enable")


def handle(broker, request, header) -> dict:
    groups = []
    for group_id in request["group_ids"]:
        if not broker.authorizer.authorize(header, "Describe", GROUP, group_id):
            described = describe_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        else:
            described = broker.share.groups.describe(group_id)
            if request["include_authorized_operations"] and not described["error_code"]:
                described["authorized_operations"] = broker.authorizer.authorized_operations(header, GROUP, group_id)
        groups.append(described)
    return {"throttle_time_ms": 0, "groups": groups}
