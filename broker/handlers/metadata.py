"""Metadata: brokers, topics and partition leaders; may auto-create topics."""

import uuid

from broker.broker import INTERNAL_TOPICS, InvalidTopic
from broker.errors import ErrorCode

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


def handle(broker, request, header) -> dict:
    wanted = request["topics"]
    if wanted is None or (header.api_version == 0 and not wanted):
        topics = [_topic_entry(broker, t) for t in broker.logs.topics.values()]
    else:
        auto_create = request["allow_auto_topic_creation"]
        topics = []
        for want in wanted:
            name = want["name"]
            # v10+: a non-zero topic id asks by id, whatever the name says (as in Kafka):
            # the Java admin's describeTopics by id sends the name "", not null
            if want["topic_id"] != ZERO_UUID:
                topic = broker.logs.topic_by_id(want["topic_id"])
                if topic is None:
                    topics.append(_error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, want["topic_id"]))
                    continue
            else:
                try:
                    topic = broker.topic_for_write(name, auto_create)
                except InvalidTopic:
                    topics.append(_error_entry(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                    continue
                if topic is None:
                    topics.append(_error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
            topics.append(_topic_entry(broker, topic))
    host, port = broker.endpoint(header)
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": broker.node_id, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }
