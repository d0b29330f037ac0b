"""DeleteShareGroupState (inter-broker): forget share partitions' durable state at their share coordinator
(DeleteGroups, DeleteShareGroupOffsets); answered once the deletions are committed."""

from broker.coordinator_partitions import settled
from broker.share.persister import ShareKey

API = "DeleteShareGroupState"
VERSIONS = (0, 0)


async def handle(broker, request, header) -> dict:
    results = []
    for topic in request["topics"]:
        partitions = []
        for p in topic["partitions"]:
            key = ShareKey(request["group_id"], topic["topic_id"], p["partition"])
            error = await settled(broker.share.persister.write_local(key, None))
            partitions.append({"partition": p["partition"], "error_code": error, "error_message": None})
        results.append({"topic_id": topic["topic_id"], "partitions": partitions})
    return {"results": results}
