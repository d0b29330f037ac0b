"""AlterPartitionReassignments (KIP-455): move a partition's replicas, e.g. onto a new broker. The new
replicas join as followers and catch up; once all are in sync the old ones leave (the leader too, if it
goes). Replicas null cancels a reassignment under way."""

from broker.errors import ErrorCode

API = "AlterPartitionReassignments"
VERSIONS = (0, 0)


async def handle(broker, request, header) -> dict:
    responses = []
    for topic in request["topics"]:
        partitions = []
        for p in topic["partitions"]:
            error, message = await broker.store.reassign(topic["name"], p["partition_index"], p["replicas"])
            partitions.append({"partition_index": p["partition_index"],
                               "error_code": ErrorCode[error] if error else ErrorCode.NONE, "error_message": message})
        responses.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}
