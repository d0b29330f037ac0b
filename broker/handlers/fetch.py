"""Fetch: hand stored batches back as they lie in the segment files.

Sessionless (KIP-227 session id 0): every response is full, which clients
accept by starting a new session next time. A fetch that finds less than
min_bytes parks until an append to one of its partitions or max_wait_ms.
"""

import asyncio

from broker.errors import ErrorCode
from storage.errors import OffsetOutOfRange

API = "Fetch"
VERSIONS = (4, 17)


def _partition(index, code, hw=-1, log_start=-1, records=b"") -> dict:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": log_start,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }


def _read(broker, request) -> tuple[dict, int, list]:
    """One pass over the requested partitions: (response, bytes found, partition keys)."""
    budget = request["max_bytes"]
    total = 0
    keys = []
    responses = []
    for want in request["topics"]:
        name = want["topic"]
        topic = broker.logs.topic(name) if name else broker.logs.topic_by_id(want["topic_id"])
        missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
        parts = []
        for p in want["partitions"]:
            index = p["partition"]
            log_ = broker.logs.log(topic.name, index) if topic else None
            if log_ is None:
                parts.append(_partition(index, missing))
                continue
            keys.append((topic.name, index))
            hw = log_.log_end_offset
            offset = p["fetch_offset"]
            records = b""
            if offset != hw and (budget > 0 or total == 0):
                limit = max(1, min(p["partition_max_bytes"], budget))
                try:
                    records = log_.read(offset, limit, max_offset=hw)
                except OffsetOutOfRange:
                    parts.append(_partition(index, ErrorCode.OFFSET_OUT_OF_RANGE, hw, log_.log_start_offset))
                    continue
                budget -= len(records)
                total += len(records)
            parts.append(_partition(index, ErrorCode.NONE, hw, log_.log_start_offset, records))
        responses.append({"topic": topic.name if topic else name, "topic_id": want["topic_id"], "partitions": parts})
    error = ErrorCode.FETCH_SESSION_ID_NOT_FOUND if request["session_id"] else ErrorCode.NONE
    if error:
        responses = []
    return {"throttle_time_ms": 0, "error_code": error, "session_id": 0, "responses": responses}, total, keys


def handle(broker, request, header):
    response, total, keys = _read(broker, request)
    if total >= request["min_bytes"] or request["max_wait_ms"] <= 0 or not keys or response["error_code"]:
        return response
    return _long_poll(broker, request, keys)


async def _long_poll(broker, request, keys):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request["max_wait_ms"] / 1000
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return _read(broker, request)[0]
        await broker.wait_for_append(keys, remaining)
        response, total, _ = _read(broker, request)
        if total >= request["min_bytes"]:
            return response
