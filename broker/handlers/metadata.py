"""Metadata: brokers, topics and partition leaders; may auto-create topics.

The topics asked for are a set, as in Kafka: a name (or id) listed many times is answered once.
Auto-creation is bounded like CreateTopics (MAX_PARTITIONS_PER_REQUEST partitions a request; the
names past it are UNKNOWN_TOPIC_OR_PARTITION, which clients retry) and done in steps, so a request
naming thousands of unknown topics does not stall everyone else.
"""

import uuid

from broker.broker import INTERNAL_TOPICS, InvalidTopic
from broker.errors import ErrorCode

from .create_topics import MAX_PARTITIONS_PER_REQUEST

API = "Metadata"
VERSIONS = (0, 12)

ZERO_UUID = uuid.UUID(int=0)


def _topic_entry(broker, topic) -> dict:
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": broker.partition_metadata(topic),
        "topic_authorized_operations": -2147483648,
    }


def _error_entry(name, code, topic_id=None) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def _entry(broker, want: dict, invalid: set[str]) -> dict:
    # v10+: a non-zero topic id asks by id, whatever the name says (as in Kafka):
    # the Java admin's describeTopics by id sends the name "", not null
    if want["topic_id"] != ZERO_UUID:
        topic = broker.logs.topic_by_id(want["topic_id"])
        return _topic_entry(broker, topic) if topic else _error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, want["topic_id"])
    name = want["name"]
    if name in invalid:
        return _error_entry(name, ErrorCode.INVALID_TOPIC_EXCEPTION)
    topic = broker.logs.topic(name)
    if topic is None:  # LEADER_NOT_AVAILABLE: a cluster is creating it (clients retry either)
        creating = broker.store.topic_creation_pending(name)
        return _error_entry(name, ErrorCode.LEADER_NOT_AVAILABLE if creating else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return _topic_entry(broker, topic)


def _unique(wanted: list[dict]) -> list[dict]:
    """The topics asked for, each once, in the order first asked."""
    seen = {}
    for want in wanted:
        seen.setdefault(want["name"] if want["topic_id"] == ZERO_UUID else want["topic_id"], want)
    return list(seen.values())


def _response(broker, header, topics: list[dict]) -> dict:
    return {
        "throttle_time_ms": 0,
        "brokers": broker.brokers(header),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.store.cache.controller_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }


async def _create_then_answer(broker, header, wanted: list[dict], names: list[str]) -> dict:
    invalid = set()
    for name in names:
        try:
            await broker.auto_create(name)
        except InvalidTopic:
            invalid.add(name)
    return _response(broker, header, [_entry(broker, want, invalid) for want in wanted])


def handle(broker, request, header):
    wanted = request["topics"]
    if wanted is None or (header.api_version == 0 and not wanted):
        return _response(broker, header, [_topic_entry(broker, t) for t in broker.logs.topics.values()])
    wanted = _unique(wanted)
    unknown = [w["name"] for w in wanted if w["topic_id"] == ZERO_UUID and broker.logs.topic(w["name"]) is None
               and broker.may_auto_create(w["name"], request["allow_auto_topic_creation"])]
    if unknown:
        return _create_then_answer(broker, header, wanted, unknown[: MAX_PARTITIONS_PER_REQUEST // broker.config["num.partitions"]])
    return _response(broker, header, [_entry(broker, want, set()) for want in wanted])
