"""OffsetDelete: drop a group's committed offsets for partitions it no longer consumes."""

from broker.coordinator.partitions import settled
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP

from .group_partitions import partition_errors, requested_partitions

API = Api("OffsetDelete", (0, 0), acl=IN_HANDLER)


async def handle(broker, request, header) -> dict:
    if not broker.authorizer.authorize(header, "Delete", GROUP, request["group_id"]):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []}
    known, errors = requested_partitions(broker, request["topics"], header)
    error, results = broker.groups.delete_offsets(request["group_id"], [tp for tp, _ in known])
    if ErrorCode.NONE in results.values():  # answered once the tombstones are committed
        error = await settled(broker.groups.committed(request["group_id"]))
        results = {tp: e or error for tp, e in results.items()}
    if error:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    errors.update(results)
    return {"error_code": 0, "throttle_time_ms": 0, "topics": partition_errors(request["topics"], errors)}
