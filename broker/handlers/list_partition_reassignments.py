"""ListPartitionReassignments (KIP-455): the reassignments under way, with their adding and removing replicas."""

from broker.errors import ErrorCode

API = "ListPartitionReassignments"
VERSIONS = (0, 0)


def handle(broker, request, header) -> dict:
    wanted = request["topics"]
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
