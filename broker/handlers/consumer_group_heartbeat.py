"""ConsumerGroupHeartbeat: join, stay in, reconcile with and leave a KIP-848 consumer group.

v1 (KIP-1082): the member id is the client's own, sent with its first heartbeat.
"""

from broker.errors import ErrorCode
from broker.security.authorizer import GROUP

API = "ConsumerGroupHeartbeat"
VERSIONS = (0, 1)


def handle(broker, request, header):
    if not broker.authorizer.authorize(header, "Read", GROUP, request["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None,
                "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}
    return broker.groups.consumer.heartbeat(request, header.api_version, header.client_id or "", header.client_host)
