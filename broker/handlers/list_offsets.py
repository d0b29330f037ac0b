"""ListOffsets: earliest, latest, max timestamp, or the first offset at a time.

For read_committed readers (v2+), latest is the last stable offset, and a
lookup by timestamp or max timestamp answers only an offset below it (else
-1), as Kafka does: nothing of an open transaction is named to them. Others get
the high watermark and offsets below it (the last fetchable offset).
A partition named more than once is INVALID_REQUEST, each time (Kafka's duplicatePartitions).

KIP-207: a new leader's high watermark may still be below the one its predecessor gave clients. Until
it reaches the offset the leader's epoch started at, latest -- and a lookup by time that finds nothing
below the last fetchable offset -- is OFFSET_NOT_AVAILABLE (retriable; LEADER_NOT_AVAILABLE before v5,
as Kafka answers), so no offset a client was told goes back.
"""

from collections import Counter

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC

API = Api("ListOffsets", (1, 9), acl=IN_HANDLER)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_TIERED = -5

READ_COMMITTED = 1


def _lookup(partition, timestamp: int, read_committed: bool) -> tuple[int, int] | None:
    """(timestamp, offset) as ListOffsets answers it, -1 for "no such record"; None: not available yet
    (KIP-207, Kafka's Partition.fetchOffsetForTimestamp)."""
    log_ = partition.log
    if timestamp in (EARLIEST, EARLIEST_LOCAL, EARLIEST_TIERED):
        return -1, log_.log_start_offset
    lagging = partition.epoch_start_offset is not None and partition.epoch_start_offset > log_.high_watermark
    last_fetchable = log_.last_stable_offset if read_committed else log_.high_watermark
    if timestamp == LATEST:
        return None if lagging else (-1, last_fetchable)
    if timestamp == MAX_TIMESTAMP:
        found = log_.max_timestamp()
    elif timestamp < 0:
        return -1, -1
    else:
        found = log_.offset_for_timestamp(timestamp)
    if found is None or found[0] >= last_fetchable:
        return None if lagging else (-1, -1)
    offset, ts = found
    return ts, offset


def handle(broker, request, header) -> dict:
    named = Counter((want["name"], p["partition_index"]) for want in request["topics"] for p in want["partitions"])
    topics = []
    for want in request["topics"]:
        name = want["name"]
        parts = []
        for p in want["partitions"]:
            index = p["partition_index"]
            if broker.authorizer.enabled and not broker.authorizer.authorize(header, "Describe", TOPIC, name):
                parts.append({"partition_index": index, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            if named[name, index] > 1:  # as Kafka: every mention of a partition named twice, unlooked-up
                parts.append({"partition_index": index, "error_code": ErrorCode.INVALID_REQUEST,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            partition, code = broker.replicas.leader_partition(name, index)
            if partition is not None:
                code = partition.check_epoch(p["current_leader_epoch"])
            if code:
                parts.append({"partition_index": index, "error_code": code,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            found = _lookup(partition, p["timestamp"], request["isolation_level"] == READ_COMMITTED)
            if found is None:
                parts.append({"partition_index": index, "timestamp": -1, "offset": -1, "leader_epoch": -1,
                              "error_code": ErrorCode.OFFSET_NOT_AVAILABLE if header.api_version >= 5
                              else ErrorCode.LEADER_NOT_AVAILABLE})
                continue
            ts, offset = found
            parts.append({"partition_index": index, "error_code": 0, "timestamp": ts, "offset": offset,
                          "leader_epoch": partition.leader_epoch})
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
