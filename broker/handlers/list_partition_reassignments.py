"""ListPartitionReassignments (KIP-455): the reassignments under way, with their adding and removing replicas."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME

API = Api("ListPartitionReassignments", (0, 0), acl=IN_HANDLER)


def handle(broker, request, header) -> dict:
    wanted = request["topics"]
    if not broker.authorizer.authorize(header, "Describe", CLUSTER, CLUSTER_NAME):
        # as Kafka: the partitions asked about, with nothing of their replicas
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
                "topics": [{"name": want["name"], "partitions": [
                    {"partition_index": index, "replicas": [], "adding_replicas": [], "removing_replicas": []}
                    for index in want["partition_indexes"]]} for want in wanted or []]}
    if wanted is None:
        wanted = [{"name": t.name, "partition_indexes": list(range(t.num_partitions))}
                  for t in broker.logs.topics.values()]
    topics = []
    for want in wanted:
        ongoing = []
        for index in want["partition_indexes"]:
            state = broker.store.cache.partition_state(want["name"], index)
            if state is not None and (state.adding or state.removing):
                ongoing.append({"partition_index": index, "replicas": list(state.replicas),
                                "adding_replicas": list(state.adding), "removing_replicas": list(state.removing)})
        if ongoing:
            topics.append({"name": want["name"], "partitions": ongoing})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": topics}
