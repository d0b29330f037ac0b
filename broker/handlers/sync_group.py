"""SyncGroup: the leader hands in the assignment; every member gets its own share."""

API = "SyncGroup"
VERSIONS = (0, 5)


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
    return _response(future)


async def _response(future) -> dict:
    result = await future
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }
