"""DescribeGroups: state, protocol and members of each named classic group; others are Dead."""

from broker.errors import ErrorCode
from broker.group.metadata import GroupState
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP

API = Api("DescribeGroups", (0, 5), acl=IN_HANDLER)

_OPERATIONS_NOT_REQUESTED = -(1 << 31)


def _member(m, group) -> dict:
    # metadata and assignment belong to a generation, so only a Stable group shows them
    stable = group.is_in(GroupState.STABLE)
    return {
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "member_metadata": m.metadata(group.protocol_name) if stable else b"",
        "member_assignment": m.assignment if stable else b"",
    }


def _describe(broker, group_id: str, operations: int) -> dict:
    group = broker.groups.groups.get(group_id)
    described = {"error_code": broker.groups.coordinator_error(group_id), "group_id": group_id,
                 "authorized_operations": operations}
    if group is None or group.consumer is not None:  # a KIP-848 group is seen with ConsumerGroupDescribe (as Kafka)
        return {**described, "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "", "members": []}
    return {
        **described,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type or "",
        "protocol_data": (group.protocol_name or "") if group.is_in(GroupState.STABLE) else "",
        "members": [_member(m, group) for m in group.members.values()],
    }


def handle(broker, request, header) -> dict:
    groups = []
    for group_id in request["groups"]:
        if not broker.authorizer.authorize(header, "Describe", GROUP, group_id):
            groups.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": group_id,
                           "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                           "authorized_operations": _OPERATIONS_NOT_REQUESTED})
            continue
        operations = (broker.authorizer.authorized_operations(header, GROUP, group_id)
                      if request["include_authorized_operations"] else _OPERATIONS_NOT_REQUESTED)
        groups.append(_describe(broker, group_id, operations))
    return {"throttle_time_ms": 0, "groups": groups}
