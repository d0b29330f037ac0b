"""Fetch: hand stored batches back as they lie in the segment files.

The request's partitions are a map (broker/log_read.py), read through a fetch
session context (broker/fetch_session.py: full, incremental or sessionless,
KIP-227). A fetch that finds less than min_bytes parks in the fetch
purgatory (broker/delayed_fetch.py) until appends bring enough or
max_wait_ms passes, and is dropped if its connection closes first.

read_committed fetches get nothing at or past the last stable offset, and
the aborted transactions among what they get, whose records the client drops.
"""

from __future__ import annotations

import uuid

from broker.broker import now_ms
from broker.delayed_fetch import DelayedFetch
from broker.fetch_session import FetchContext, new_context
from broker.log_read import FetchPartition, PartitionData, TopicPartition, read_from_logs

API = "Fetch"
VERSIONS = (4, 17)

TOPIC_IDS_SINCE = 13  # v13+ names topics by id
_NO_TOPIC_ID = uuid.UUID(int=0)


def requested_partitions(request, uses_topic_ids: bool) -> dict[TopicPartition, FetchPartition]:
    """The request's partitions as a map: one entry per partition, the last one named wins."""
    wanted: dict[TopicPartition, FetchPartition] = {}
    for want in request["topics"]:
        topic = want["topic_id"] if uses_topic_ids else want["topic"]
        for p in want["partitions"]:
            wanted[TopicPartition(topic, p["partition"])] = FetchPartition(
                p["fetch_offset"], p["partition_max_bytes"], p["log_start_offset"], p["current_leader_epoch"])
    return wanted


def forgotten_partitions(request, uses_topic_ids: bool) -> list[TopicPartition]:
    return [TopicPartition(t["topic_id"] if uses_topic_ids else t["topic"], p)
            for t in request["forgotten_topics_data"] for p in t["partitions"]]


def handle(broker, request, header):
    uses_topic_ids = header.api_version >= TOPIC_IDS_SINCE
    context = new_context(
        broker.fetch_sessions, request["session_id"], request["session_epoch"],
        requested_partitions(request, uses_topic_ids), forgotten_partitions(request, uses_topic_ids),
        uses_topic_ids, privileged=request["replica_id"] >= 0, now_ms=now_ms())
    if context.error:
        return _response(context, {})
    isolation = request["isolation_level"]
    max_bytes = min(request["max_bytes"], broker.config["fetch.max.bytes"])
    found, total = read_from_logs(broker.logs, context.to_read(broker.logs), isolation, max_bytes)
    if total >= request["min_bytes"] or request["max_wait_ms"] <= 0:
        return _response(context, found)
    delayed = DelayedFetch(broker.logs, context.partitions, isolation, request["min_bytes"], total)
    if not delayed.topics:
        return _response(context, found)
    return _complete_later(broker, context, delayed, max_bytes, request["max_wait_ms"])


async def _complete_later(broker, context: FetchContext, delayed: DelayedFetch, max_bytes: int, max_wait_ms: int):
    await broker.fetch_purgatory.park(delayed, max_wait_ms / 1000)
    found, _ = read_from_logs(broker.logs, context.to_read(broker.logs), delayed.isolation, max_bytes)
    return _response(context, found)


def _response(context: FetchContext, found: dict[TopicPartition, PartitionData]) -> dict:
    session_id, listed = context.respond(found, now_ms())
    responses = []
    last = partitions = None
    for key, data in listed.items():
        if key.topic != last:  # consecutive partitions of a topic share an entry
            last, partitions = key.topic, []
            by_id = isinstance(key.topic, uuid.UUID)
            responses.append({"topic": "" if by_id else key.topic, "topic_id": key.topic if by_id else _NO_TOPIC_ID,
                              "partitions": partitions})
        partitions.append({
            "partition_index": key.partition,
            "error_code": data.error,
            "high_watermark": data.high_watermark,
            "last_stable_offset": data.last_stable_offset,
            "log_start_offset": data.log_start_offset,
            "aborted_transactions": data.aborted_transactions,
            "preferred_read_replica": -1,
            "records": data.records,
        })
    return {"throttle_time_ms": 0, "error_code": context.error, "session_id": session_id, "responses": responses}
