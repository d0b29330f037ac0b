"""JoinGroup: join a group's next generation; answered when its join phase ends."""

from broker.coordinator.partitions import settled
from broker.group.metadata import MemberMetadata
from broker.handlers import Api
from broker.security.authorization import GROUP_READ

API = Api("JoinGroup", (0, 9), acl=GROUP_READ)


def handle(broker, request, header):
    version = header.api_version
    joining = MemberMetadata(
        member_id=request["member_id"],
        group_instance_id=request["group_instance_id"],
        client_id=header.client_id or "",
        client_host=header.client_host,
        # v0 has no rebalance timeout: the session timeout serves as both
        rebalance_timeout_ms=request["rebalance_timeout_ms"] if version >= 1 else request["session_timeout_ms"],
        session_timeout_ms=request["session_timeout_ms"],
        protocol_type=request["protocol_type"],
        protocols=[(p["name"], p["metadata"]) for p in request["protocols"]],
    )
    future = broker.groups.join_group(
        request["group_id"], joining, require_known_member_id=version >= 4, supports_skip_assignment=version >= 9
    )
    return _response(broker, request["group_id"], future, version)


async def _response(broker, group_id: str, future, version: int) -> dict:
    result = await future
    error = await settled(broker.groups.committed(group_id, result.error))  # a static member's rejoin is written
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        # not nullable before v7
        "protocol_name": "" if result.protocol_name is None and version < 7 else result.protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": result.members,
    }
