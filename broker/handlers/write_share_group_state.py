"""WriteShareGroupState (inter-broker): a share partition's leader writes its new state at its share
coordinator, answered once committed; a write from an older leadership is FENCED_LEADER_EPOCH."""

from broker.coordinator.partitions import settled
from broker.handlers import Api
from broker.share.persister import ShareKey, Snapshot

API = Api("WriteShareGroupState", (0, 0), inter_broker=True)


async def handle(broker, request, header) -> dict:
    return await each_partition(request, lambda key, p: broker.share.persister.write_local(
        key, Snapshot(p["start_offset"], p["state_batches"], p["state_epoch"], p["leader_epoch"])))


async def each_partition(request, write) -> dict:
    """The results of ``write(key, partition)`` (a Pending error) for each partition the request names."""
    results = []
    for topic in request["topics"]:
        partitions = []
        for p in topic["partitions"]:
            error = await settled(write(ShareKey(request["group_id"], topic["topic_id"], p["partition"]), p))
            partitions.append({"partition": p["partition"], "error_code": error, "error_message": None})
        results.append({"topic_id": topic["topic_id"], "partitions": partitions})
    return {"results": results}
