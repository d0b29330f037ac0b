"""Heartbeat: keeps a member's session alive and tells it when to rejoin."""

from broker.handlers import Api
from broker.security.authorization import GROUP_READ

API = Api("Heartbeat", (0, 4), acl=GROUP_READ)


def handle(broker, request, header) -> dict:
    error = broker.groups.heartbeat(
        request["group_id"], request["member_id"], request["group_instance_id"], request["generation_id"]
    )
    return {"throttle_time_ms": 0, "error_code": error}
