"""DeleteRecords: move partitions' log start offsets up (AdminClient delete_records).

Offset -1 means the high watermark. The records below become unreadable at
once (fetches there get OFFSET_OUT_OF_RANGE); the segments wholly below go
right away, their files after file.delete.delay.ms.
"""

import logging

from broker.coordinator.internal_topics import INTERNAL_TOPICS
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC
from storage import clock
from storage.errors import OffsetOutOfRange

API = Api("DeleteRecords", (0, 2), acl=IN_HANDLER)

HIGH_WATERMARK = -1

log = logging.getLogger("moldau.delete_records")


def _delete(broker, name: str, partition: int, offset: int) -> tuple[int, ErrorCode]:
    """(low watermark, error) for one partition."""
    log_ = broker.logs.log(name, partition)
    if log_ is None:
        return -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if name in INTERNAL_TOPICS:
        return -1, ErrorCode.INVALID_TOPIC_EXCEPTION  # the coordinators' state lives there
    if not log_.config.delete:
        return -1, ErrorCode.POLICY_VIOLATION  # Kafka: not while the partition is compacted only
    try:
        low = broker.logs.delete_records(name, partition, log_.high_watermark if offset == HIGH_WATERMARK else offset)
    except OffsetOutOfRange:
        return -1, ErrorCode.OFFSET_OUT_OF_RANGE
    except OSError as exc:  # the log start checkpoint could not be written
        log.error("DeleteRecords on %s-%d failed: %s", name, partition, exc)
        return -1, ErrorCode.KAFKA_STORAGE_ERROR
    return low, ErrorCode.NONE


def handle(broker, request, header) -> dict:
    topics = []
    for want in request["topics"]:
        name = want["name"]
        deletable = broker.authorizer.authorize(header, "Delete", TOPIC, name)
        parts = []
        for p in want["partitions"]:
            if deletable:
                low, code = _delete(broker, name, p["partition_index"], p["offset"])
            else:
                low, code = -1, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            parts.append({"partition_index": p["partition_index"], "low_watermark": low, "error_code": code})
        topics.append({"name": name, "partitions": parts})
    try:
        broker.delete_old_segments(clock.wall_ms())
    except OSError as exc:  # the log start offsets moved and are persisted; the files go at the next check
        log.error("deleting segments after DeleteRecords failed: %s", exc)
    return {"throttle_time_ms": 0, "topics": topics}
