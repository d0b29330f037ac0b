"""AlterShareGroupOffsets: set where an empty share group's partitions start (their SPSO); what was in flight
there is forgotten. Written to __share_group_state before the answer."""

import uuid

from broker.errors import ErrorCode
from broker.security.authorizer import GROUP, TOPIC
from broker.share.persister import ShareKey
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER

API = Api("AlterShareGroupOffsets", (0, 0), acl=IN_HANDLER, enabled_by="group.share.enable")


async def handle(broker, request, header) -> dict:
    group_id = request["group_id"]
    error = _group_error(broker, header, group_id, "Read")
    if error:
        return {"throttle_time_ms": 0, "error_code": error, "error_message": None, "responses": []}
    await broker.share.persister.loaded()
    responses = []
    for wanted in request["topics"]:
        name = wanted["topic_name"]
        topic = broker.logs.topic(name)
        partitions = []
        for p in wanted["partitions"]:
            if not broker.authorizer.authorize(header, "Read", TOPIC, name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p["partition_index"] < topic.num_partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p["start_offset"] < 0:
                code = ErrorCode.INVALID_REQUEST
            else:
                code = await broker.share.partitions.alter_start(
                    ShareKey(group_id, topic.topic_id, p["partition_index"]), p["start_offset"])
            partitions.append({"partition_index": p["partition_index"], "error_code": code, "error_message": None})
        responses.append({"topic_name": name, "topic_id": topic.topic_id if topic else uuid.UUID(int=0),
                          "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


def _group_error(broker, header, group_id: str, operation: str) -> ErrorCode:
    """Why the share group's offsets may not be changed here and now, or NONE."""
    if not broker.authorizer.authorize(header, operation, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if error := broker.groups.coordinator_error(group_id):
        return error
    if group_id in broker.groups.groups:
        return ErrorCode.GROUP_ID_NOT_FOUND
    if broker.share.groups.members(group_id):
        return ErrorCode.NON_EMPTY_GROUP
    return ErrorCode.NONE
