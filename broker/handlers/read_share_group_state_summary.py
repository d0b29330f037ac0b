"""ReadShareGroupStateSummary (inter-broker, the share coordinator's): a share partition's start offset, epochs
and (v1, KIP-1226) how many offsets of its window are done, for the group coordinator's admin view
(DescribeShareGroupOffsets). A partition with no state answers -1s."""

from broker.handlers import Api
from broker.share.persister import ShareKey

API = Api("ReadShareGroupStateSummary", (0, 1), inter_broker=True)


def handle(broker, request, header) -> dict:
    results = []
    for topic in request["topics"]:
        partitions = []
        for p in topic["partitions"]:
            error, found = broker.share.persister.summary_local(ShareKey(request["group_id"], topic["topic_id"],
                                                                         p["partition"]))
            partitions.append({"partition": p["partition"], "error_code": error, "error_message": None,
                               "state_epoch": found.state_epoch if found else -1,
                               "leader_epoch": found.leader_epoch if found else -1,
                               "start_offset": found.start_offset if found else -1,
                               "delivery_complete_count": found.delivery_complete_count if found else -1})
        results.append({"topic_id": topic["topic_id"], "partitions": partitions})
    return {"results": results}
