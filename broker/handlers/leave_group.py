"""LeaveGroup: members leave at once instead of waiting out their session (batched from v3)."""

from broker.coordinator.partitions import settled
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import GROUP_READ

API = Api("LeaveGroup", (0, 5), acl=GROUP_READ)


async def handle(broker, request, header) -> dict:
    batched = header.api_version >= 3
    if batched:
        leaving = [(m["member_id"], m["group_instance_id"]) for m in request["members"]]
    else:
        leaving = [(request["member_id"], None)]
    error, member_errors = broker.groups.leave_group(request["group_id"], leaving)
    if error == ErrorCode.NONE:  # a member's leaving may have emptied the group, which is written
        error = await settled(broker.groups.committed(request["group_id"]))
    if not batched and error == ErrorCode.NONE:
        error = member_errors[0]  # one member, one error code
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
            for (member_id, instance_id), member_error in zip(leaving, member_errors, strict=False)
        ],
    }
