"""OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ended in the leader's log.

Answers the largest epoch at or below the one asked for, and the offset
where the next epoch began (the log end offset for the latest epoch).
Consumers use it after a leader change to detect truncation.
"""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME, TOPIC

API = Api("OffsetForLeaderEpoch", (2, 4), acl=IN_HANDLER)


def _end_offset(broker, allowed: bool, topic: str, p: dict) -> dict:
    index = p["partition"]
    if not allowed:
        return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "partition": index, "leader_epoch": -1,
                "end_offset": -1}
    partition, code = broker.replicas.leader_partition(topic, index)
    if partition is not None:
        code = partition.check_epoch(p["current_leader_epoch"])
    if code:
        return {"error_code": code, "partition": index, "leader_epoch": -1, "end_offset": -1}
    log_ = partition.log
    epoch, end = log_.leader_epochs.end_offset_for(p["leader_epoch"], log_.log_end_offset)
    return {"error_code": ErrorCode.NONE, "partition": index, "leader_epoch": epoch, "end_offset": end}


def handle(broker, request, header) -> dict:
    authorizer = broker.authorizer
    # a consumer needs Describe on each topic; a follower (replica id set) ClusterAction on the cluster
    follower = request.get("replica_id", -2) >= 0
    cluster_action = follower and authorizer.authorize(header, "ClusterAction", CLUSTER, CLUSTER_NAME)
    topics = []
    for t in request["topics"]:
        allowed = cluster_action if follower else authorizer.authorize(header, "Describe", TOPIC, t["topic"])
        topics.append({"topic": t["topic"], "partitions": [_end_offset(broker, allowed, t["topic"], p)
                                                           for p in t["partitions"]]})
    return {"throttle_time_ms": 0, "topics": topics}
