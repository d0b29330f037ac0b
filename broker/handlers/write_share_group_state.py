"""WriteShareGroupState (inter-broker): a share partition's leader writes its new state at its share
coordinator, answered once committed; a write from an older leadership is FENCED_LEADER_EPOCH."""

from broker.coordinator_partitions import settled
from broker.share.persister import ShareKey, Snapshot

API = "WriteShareGroupState"
VERSIONS = (0, 0)


async def handle(broker, request, header) -> dict:
    results = []
    for topic in request["topics"]:
        partitions = []
        for p in topic["partitions"]:
            key = ShareKey(request["group_id"], topic["topic_id"], p["partition"])
            snapshot = Snapshot(p["start_offset"], p["state_batches"], p["state_epoch"], p["leader_epoch"])
            error = await settled(broker.share.persister.write_local(key, snapshot))
            partitions.append({"partition": p["partition"], "error_code": error, "error_message": None})
        results.append({"topic_id": topic["topic_id"], "partitions": partitions})
    return {"results": results}
