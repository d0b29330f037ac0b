"""OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ended in the leader's log.

Answers the largest epoch at or below the one asked for, and the offset
where the next epoch began (the log end offset for the latest epoch).
Consumers use it after a leader change to detect truncation.
"""

from broker.errors import ErrorCode

API = "OffsetForLeaderEpoch"
VERSIONS = (2, 4)


def _end_offset(broker, topic: str, p: dict) -> dict:
    index = p["partition"]
    partition, code = broker.replicas.leader_partition(topic, index)
    if partition is not None:
        code = partition.check_epoch(p["current_leader_epoch"])
    if code:
        return {"error_code": code, "partition": index, "leader_epoch": -1, "end_offset": -1}
    log_ = partition.log
    epoch, end = log_.leader_epochs.end_offset_for(p["leader_epoch"], log_.log_end_offset)
    return {"error_code": ErrorCode.NONE, "partition": index, "leader_epoch": epoch, "end_offset": end}


def handle(broker, request, header) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"topic": t["topic"], "partitions": [_end_offset(broker, t["topic"], p) for p in t["partitions"]]}
        for t in request["topics"]]}
