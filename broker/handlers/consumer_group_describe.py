"""ConsumerGroupDescribe: epochs, assignor, and each member's assignment and target of KIP-848 groups."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP

API = Api("ConsumerGroupDescribe", (0, 0), acl=IN_HANDLER)


def handle(broker, request, header) -> dict:
    groups = []
    for group_id in request["group_ids"]:
        if not broker.authorizer.authorize(header, "Describe", GROUP, group_id):
            described = broker.groups.consumer.describe_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        else:
            described = broker.groups.consumer.describe(group_id)
            if request["include_authorized_operations"]:
                described["authorized_operations"] = broker.authorizer.authorized_operations(header, GROUP, group_id)
        groups.append(described)
    return {"throttle_time_ms": 0, "groups": groups}
