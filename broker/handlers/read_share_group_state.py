"""ReadShareGroupState (inter-broker): a share partition's durable state, asked of its share coordinator by
the topic partition's leader when it makes the share partition (broker/share/persister.py)."""

from broker.handlers import Api
from broker.share.persister import ShareKey

API = Api("ReadShareGroupState", (0, 0), inter_broker=True)


def handle(broker, request, header) -> dict:
    results = []
    for topic in request["topics"]:
        partitions = []
        for p in topic["partitions"]:
            error, found = broker.share.persister.read_local(ShareKey(request["group_id"], topic["topic_id"],
                                                                      p["partition"]))
            partitions.append({"partition": p["partition"], "error_code": error, "error_message": None,
                               "state_epoch": found.state_epoch if found else 0,
                               "start_offset": found.start_offset if found else -1,
                               "state_batches": found.state_batches if found else []})
        results.append({"topic_id": topic["topic_id"], "partitions": partitions})
    return {"results": results}
