"""DeleteTopics: by name (v0-5) or by name or id (v6+), on every broker of the cluster."""

import logging

from broker.coordinator.internal_topics import INTERNAL_TOPICS
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.network.client_quotas import QUOTA_EXCEEDED, ControllerMutations
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC
from storage.errors import UnknownTopic

log = logging.getLogger("moldau.delete_topics")

API = Api("DeleteTopics", (1, 6), acl=IN_HANDLER)


async def _delete(broker, header, name, topic_id, mutations: ControllerMutations) -> dict:
    topic = broker.store.topic(name) if name else broker.store.topic_by_id(topic_id)
    if not broker.authorizer.authorize(header, "Delete", TOPIC, topic.name if topic else name or ""):
        return {"name": name, "topic_id": topic_id, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "error_message": None}
    if topic is None:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name else ErrorCode.UNKNOWN_TOPIC_ID
        return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": None}
    if topic.name in INTERNAL_TOPICS:
        return {"name": topic.name, "topic_id": topic.topic_id, "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": "internal topics cannot be deleted"}
    if mutations.refused():
        return {"name": topic.name, "topic_id": topic.topic_id, "error_code": ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                "error_message": QUOTA_EXCEEDED}
    try:
        await broker.store.delete_topic(topic.name)
    except UnknownTopic:
        return {"name": topic.name, "topic_id": topic.topic_id, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "error_message": None}
    mutations.record(topic.num_partitions)
    log.info("deleted topic %s (%d partitions)", topic.name, topic.num_partitions)
    return {"name": topic.name, "topic_id": topic.topic_id, "error_code": 0, "error_message": None}


async def handle(broker, request, header) -> dict:
    if header.api_version >= 6:
        wanted = [(t["name"], t["topic_id"]) for t in request["topics"]]
    else:
        wanted = [(name, None) for name in request["topic_names"]]
    mutations = ControllerMutations(broker.quotas, header, strict=header.api_version >= 5)
    responses = [await _delete(broker, header, n, i, mutations) for n, i in wanted]
    return {"throttle_time_ms": mutations.throttle_ms, "responses": responses}
