"""DeleteGroups: remove empty groups, their committed offsets and their group configs."""

from broker.config import group_configs
from broker.coordinator.partitions import settled
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP

API = Api("DeleteGroups", (0, 2), acl=IN_HANDLER)


async def handle(broker, request, header) -> dict:
    names = request["groups_names"]
    allowed = [g for g in names if broker.authorizer.authorize(header, "Delete", GROUP, g)]
    results = {g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in names}
    await broker.share.persister.loaded()
    shared = broker.share.groups.group_ids()
    results.update(broker.groups.delete_groups([g for g in allowed if g not in shared]) if allowed else {})
    for group_id in [g for g in allowed if g in shared]:
        results[group_id] = await broker.share.groups.delete(group_id)
    for group_id, error in results.items():  # each answered once its tombstones are committed
        results[group_id] = await settled(broker.groups.committed(group_id, error))
        if results[group_id] == ErrorCode.NONE:
            await group_configs.forget(broker, group_id)
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": e} for g, e in results.items()]}
