"""AlterPartitionReassignments (KIP-455): move a partition's replicas, e.g. onto a new broker. The new
replicas join as followers and catch up; once all are in sync the old ones leave (the leader too, if it
goes). Replicas null cancels a reassignment under way."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME

API = Api("AlterPartitionReassignments", (0, 0), acl=IN_HANDLER)


async def handle(broker, request, header) -> dict:
    allowed = broker.authorizer.authorize(header, "Alter", CLUSTER, CLUSTER_NAME)
    responses = []
    for topic in request["topics"]:
        partitions = []
        for p in topic["partitions"]:
            if allowed:
                error, message = await broker.store.reassign(topic["name"], p["partition_index"], p["replicas"])
            else:  # Kafka gives every partition the request's error
                error, message = "CLUSTER_AUTHORIZATION_FAILED", None
            partitions.append({"partition_index": p["partition_index"],
                               "error_code": ErrorCode[error] if error else ErrorCode.NONE, "error_message": message})
        responses.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None, "responses": responses}
