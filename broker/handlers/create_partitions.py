"""CreatePartitions: grow a topic's partition count."""

import logging

from broker.errors import ErrorCode

from .create_topics import MAX_PARTITIONS_PER_REQUEST

API = "CreatePartitions"
VERSIONS = (0, 3)

log = logging.getLogger("moldau.create_partitions")


def _grow(broker, want: dict, validate_only: bool) -> dict:
    name, count = want["name"], want["count"]
    topic = broker.logs.topic(name)
    if topic is None:
        return {"name": name, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "error_message": None}
    if count <= topic.num_partitions:
        return {"name": name, "error_code": ErrorCode.INVALID_PARTITIONS,
                "error_message": f"topic has {topic.num_partitions} partitions; {count} is not more"}
    if not validate_only:
        broker.logs.add_partitions(name, count)
        log.info("topic %s grown from %d to %d partitions", name, topic.num_partitions, count)
    return {"name": name, "error_code": 0, "error_message": None}


def _added(broker, want: dict) -> int:
    topic = broker.logs.topic(want["name"])
    return max(want["count"] - topic.num_partitions, 0) if topic else 0


def handle(broker, request, header) -> dict:
    topics = request["topics"]
    if sum(_added(broker, t) for t in topics) > MAX_PARTITIONS_PER_REQUEST:
        return {"throttle_time_ms": 0, "results": [
            {"name": t["name"], "error_code": ErrorCode.POLICY_VIOLATION,
             "error_message": "Unable to perform excessively large batch operation."} for t in topics]}
    return {"throttle_time_ms": 0,
            "results": [_grow(broker, t, request["validate_only"]) for t in topics]}
