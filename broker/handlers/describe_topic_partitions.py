"""DescribeTopicPartitions (KIP-966): topics and partitions, with a cursor."""

from broker.coordinator.internal_topics import INTERNAL_TOPICS
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC

API = Api("DescribeTopicPartitions", (0, 0), acl=IN_HANDLER)


def handle(broker, request, header) -> dict:
    names = [t["name"] for t in request["topics"]] or sorted(broker.store.topics)
    limit = max(1, request["response_partition_limit"])
    cursor = request["cursor"]
    if cursor is not None:
        names = [n for n in sorted(names) if n >= cursor["topic_name"]]
    topics = []
    next_cursor = None
    for name in names:
        topic = broker.store.topic(name)
        if not broker.authorizer.authorize(header, "Describe", TOPIC, name):
            if request["topics"]:  # asked by name: told no; all topics: those it may describe
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []})
            continue
        if topic is None:
            topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []})
            continue
        start = cursor["partition_index"] if cursor is not None and name == cursor["topic_name"] else 0
        partitions = broker.partition_metadata(topic)[start:]
        if len(partitions) > limit:
            next_cursor = {"topic_name": name, "partition_index": start + limit}
            partitions = partitions[:limit]
        limit -= len(partitions)
        topics.append({"error_code": 0, "name": name, "topic_id": topic.topic_id,
                       "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
                       "topic_authorized_operations": broker.authorizer.authorized_operations(header, TOPIC, name)})
        if next_cursor is not None or limit <= 0:
            if next_cursor is None and name != names[-1]:
                next_cursor = {"topic_name": names[names.index(name) + 1], "partition_index": 0}
            break
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}
