"""DeleteShareGroupOffsets: forget an empty share group's state for whole topics (moved to DeletingTopics of its
ShareGroupStatePartitionMetadata while their state is deleted); their next fetch starts at
share.auto.offset.reset."""

import uuid

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC

from .alter_share_group_offsets import _group_error

API = Api("DeleteShareGroupOffsets", (0, 0), acl=IN_HANDLER, enabled_by="group.share.enable")


async def handle(broker, request, header) -> dict:
    group_id = request["group_id"]
    error = _group_error(broker, header, group_id, "Delete")
    if error:
        return {"throttle_time_ms": 0, "error_code": error, "error_message": None, "responses": []}
    await broker.share.persister.loaded()
    group = broker.share.groups.groups[group_id]
    responses, deletable = [], []
    for wanted in request["topics"]:
        name = wanted["topic_name"]
        topic = broker.logs.topic(name)
        if not broker.authorizer.authorize(header, "Read", TOPIC, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            code = ErrorCode.NONE
            deletable.append(topic.topic_id)
        responses.append({"topic_name": name, "topic_id": topic.topic_id if topic else uuid.UUID(int=0),
                          "error_code": code, "error_message": None})
    error = await broker.share.groups.delete_offsets(group, deletable)
    for r in responses:
        if r["topic_id"] in deletable:
            r["error_code"] = error
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}
