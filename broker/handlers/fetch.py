"""Fetch: hand stored batches back as they lie in the segment files.

Sessionless (KIP-227 session id 0): every response is full, which clients
accept by starting a new session next time. A fetch that finds less than
min_bytes parks until an append to one of its partitions or max_wait_ms.

read_committed fetches get nothing at or past the last stable offset, and
the aborted transactions among what they get, whose records the client drops.
"""

import asyncio

from broker.errors import ErrorCode
from storage.errors import OffsetOutOfRange

API = "Fetch"
VERSIONS = (4, 17)

READ_COMMITTED = 1


def _partition(index, code, log_=None, records=b"", aborted=None) -> dict:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": log_.high_watermark if log_ else -1,
        "last_stable_offset": log_.last_stable_offset if log_ else -1,
        "log_start_offset": log_.log_start_offset if log_ else -1,
        "aborted_transactions": aborted,
        "preferred_read_replica": -1,
        "records": records,
    }


def _read(broker, request) -> tuple[dict, int, list]:
    """One pass over the requested partitions: (response, bytes found, partition keys)."""
    budget = request["max_bytes"]
    read_committed = request["isolation_level"] == READ_COMMITTED
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
            offset = p["fetch_offset"]
            records = b""
            aborted = [] if read_committed else None
            if offset != log_.high_watermark and (budget > 0 or total == 0):
                limit = min(p["partition_max_bytes"], budget)
                # KIP-74: only the first partition with data may exceed the limits, by one batch
                min_one = total == 0
                try:
                    if read_committed:
                        records, aborted_txns = log_.read_committed(offset, limit, min_one)
                        aborted = [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted_txns]
                    else:
                        records = log_.read(offset, limit, min_one=min_one)
                except OffsetOutOfRange:
                    parts.append(_partition(index, ErrorCode.OFFSET_OUT_OF_RANGE, log_))
                    continue
                budget -= len(records)
                total += len(records)
            parts.append(_partition(index, ErrorCode.NONE, log_, records, aborted))
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
        # read before every wait: an append can land between handle() and this
        # coroutine's first step, and its notification would otherwise be missed
        response, total, _ = _read(broker, request)
        remaining = deadline - loop.time()
        if total >= request["min_bytes"] or remaining <= 0:
            return response
        await broker.wait_for_append(keys, remaining)
