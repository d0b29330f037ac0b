"""Raw Fetch requests an abusive client sends (issue 20, findings 1 and 4), for the abuse tests and the fuzzer."""

from __future__ import annotations

import uuid

from protocol import frames

FOREVER = 0x7FFFFFFF


def fetch_request(correlation_id: int, topic: str, partitions: list[int], *, max_wait_ms: int = FOREVER,
                  min_bytes: int = FOREVER, max_bytes: int = FOREVER, fetch_offset: int = 0,
                  isolation_level: int = 0) -> bytes:
    """A framed Fetch v11 naming ``partitions`` of ``topic`` (a partition may be named many times)."""
    return frames.encode_request("Fetch", 11, correlation_id, "abuser", {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": uuid.UUID(int=0), "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": fetch_offset, "log_start_offset": -1,
             "partition_max_bytes": FOREVER} for p in partitions]}]})


def abusive_fetches(topic: str) -> list[bytes]:
    """The issue's patterns, smaller: a long poll naming one partition 2,000 times, and a Fetch
    naming a partition 250 times with no size limit."""
    return [fetch_request(1, topic, [0] * 2000), fetch_request(2, topic, [0] * 250, max_wait_ms=0, min_bytes=0)]
