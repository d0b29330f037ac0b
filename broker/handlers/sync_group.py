"""SyncGroup: the leader hands in the assignment; every member gets its own share."""

from broker.coordinator.partitions import settled
from broker.handlers import Api
from broker.security.authorization import GROUP_READ

API = Api("SyncGroup", (0, 5), acl=GROUP_READ)


def handle(broker, request, header):
    future = broker.groups.sync_group(
        request["group_id"],
        request["generation_id"],
        request["member_id"],
        request["group_instance_id"],
        request["protocol_type"],
        request["protocol_name"],
        {a["member_id"]: a["assignment"] for a in request["assignments"]},
    )
    return _response(broker, request["group_id"], future)


async def _response(broker, group_id: str, future) -> dict:
    result = await future
    error = await settled(broker.groups.committed(group_id, result.error))  # the leader's assignment is written
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }
