"""Heartbeat: keeps a member's session alive and tells it when to rejoin."""

API = "Heartbeat"
VERSIONS = (0, 4)


def handle(broker, request, header) -> dict:
    error = broker.groups.heartbeat(
        request["group_id"], request["member_id"], request["group_instance_id"], request["generation_id"]
    )
    return {"throttle_time_ms": 0, "error_code": error}
