"""Fetch: hand stored batches back as they lie in the segment files.

Sessionless (KIP-227 session id 0): every response is full, which clients
accept by starting a new session next time. The request's partitions are a
map (broker/log_read.py); a fetch that finds less than min_bytes parks in the
fetch purgatory (broker/delayed_fetch.py) until appends bring enough or
max_wait_ms passes, and is dropped if its connection closes first.

read_committed fetches get nothing at or past the last stable offset, and
the aborted transactions among what they get, whose records the client drops.
"""

from __future__ import annotations

from broker.delayed_fetch import DelayedFetch
from broker.errors import ErrorCode
from broker.log_read import FetchPartition, PartitionData, TopicPartition, read_from_logs

API = "Fetch"
VERSIONS = (4, 17)


def requested_partitions(broker, request) -> dict[TopicPartition, FetchPartition]:
    """The request's partitions as a map: one entry per partition, the last one named wins."""
    wanted: dict[TopicPartition, FetchPartition] = {}
    logs = broker.logs
    for want in request["topics"]:
        name = want["topic"]
        topic = logs.topic(name) if name else logs.topic_by_id(want["topic_id"])
        missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
        topic_name = topic.name if topic else name or str(want["topic_id"])
        for p in want["partitions"]:
            index = p["partition"]
            log_ = logs.log(topic.name, index) if topic else None
            wanted[TopicPartition(topic_name, index)] = FetchPartition(
                want["topic_id"], p["fetch_offset"], p["partition_max_bytes"], p["log_start_offset"],
                p["current_leader_epoch"], log_, ErrorCode.NONE if log_ else missing)
    return wanted


def handle(broker, request, header):
    if request["session_id"]:
        return _response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, {}, {})
    wanted = requested_partitions(broker, request)
    isolation = request["isolation_level"]
    max_bytes = min(request["max_bytes"], broker.config["fetch.max.bytes"])
    found, total = read_from_logs(wanted, isolation, max_bytes)
    if total >= request["min_bytes"] or request["max_wait_ms"] <= 0:
        return _response(ErrorCode.NONE, wanted, found)
    delayed = DelayedFetch(wanted, isolation, request["min_bytes"], total)
    if not delayed.watched:
        return _response(ErrorCode.NONE, wanted, found)
    return _complete_later(broker, delayed, wanted, max_bytes, request["max_wait_ms"])


async def _complete_later(broker, delayed, wanted, max_bytes, max_wait_ms):
    await broker.fetch_purgatory.park(delayed, max_wait_ms / 1000)
    found, _ = read_from_logs(wanted, delayed.isolation, max_bytes)
    return _response(ErrorCode.NONE, wanted, found)


def _response(error: int, wanted: dict[TopicPartition, FetchPartition], found: dict[TopicPartition, PartitionData]):
    responses = []
    topic = None
    for key, data in found.items():
        if topic is None or topic["topic"] != key.topic:  # consecutive partitions of a topic share an entry
            topic = {"topic": key.topic, "topic_id": wanted[key].topic_id, "partitions": []}
            responses.append(topic)
        topic["partitions"].append({
            "partition_index": key.partition,
            "error_code": data.error,
            "high_watermark": data.high_watermark,
            "last_stable_offset": data.last_stable_offset,
            "log_start_offset": data.log_start_offset,
            "aborted_transactions": data.aborted_transactions,
            "preferred_read_replica": -1,
            "records": data.records,
        })
    return {"throttle_time_ms": 0, "error_code": error, "session_id": 0, "responses": responses}
