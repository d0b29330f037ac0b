"""ShareGroupHeartbeat: join, stay in and leave a share group (KIP-932); the member id is the client's own."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP

API = Api("ShareGroupHeartbeat", (1, 1), acl=IN_HANDLER, enabled_by="group.share.enable")


def handle(broker, request, header):
    if not broker.authorizer.authorize(header, "Read", GROUP, request["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None,
                "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}
    return broker.share.groups.heartbeat(request, header.client_id or "", header.client_host)
