"""AlterShareGroupOffsets: set where an empty share group's partitions start (their SPSO); what was in flight
there is forgotten. InitializeShareGroupState at each partition's share coordinator, then the partitions are
recorded as initialized in the group's ShareGroupStatePartitionMetadata, before the answer."""

import uuid

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP, TOPIC
from broker.share.persister import ShareKey

API = Api("AlterShareGroupOffsets", (0, 0), acl=IN_HANDLER, enabled_by="group.share.enable")


async def handle(broker, request, header) -> dict:
    group_id = request["group_id"]
    error = _group_error(broker, header, group_id, "Read")
    if error:
        return {"throttle_time_ms": 0, "error_code": error, "error_message": None, "responses": []}
    await broker.share.persister.loaded()
    codes, starts = {}, {}
    for wanted in request["topics"]:
        name = wanted["topic_name"]
        topic = broker.logs.topic(name)
        for p in wanted["partitions"]:
            index = (name, p["partition_index"])
            if not broker.authorizer.authorize(header, "Read", TOPIC, name):
                codes[index] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p["partition_index"] < topic.num_partitions:
                codes[index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p["start_offset"] < 0:
                codes[index] = ErrorCode.INVALID_REQUEST
            else:
                starts[ShareKey(group_id, topic.topic_id, p["partition_index"])] = p["start_offset"]
    group = broker.share.groups.groups[group_id]
    for key, code in (await broker.share.groups.alter_offsets(group, starts)).items():
        codes[(broker.logs.topic_by_id(key.topic_id).name, key.partition)] = code
    responses = []
    for wanted in request["topics"]:
        topic = broker.logs.topic(wanted["topic_name"])
        responses.append({"topic_name": wanted["topic_name"], "topic_id": topic.topic_id if topic else uuid.UUID(int=0),
                          "partitions": [{"partition_index": p["partition_index"], "error_message": None,
                                          "error_code": codes[(wanted["topic_name"], p["partition_index"])]}
                                         for p in wanted["partitions"]]})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


def _group_error(broker, header, group_id: str, operation: str) -> ErrorCode:
    """Why the share group's offsets may not be changed here and now, or NONE."""
    if not broker.authorizer.authorize(header, operation, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if error := broker.groups.coordinator_error(group_id):
        return error
    if group_id not in broker.share.groups.groups:
        return ErrorCode.GROUP_ID_NOT_FOUND
    if broker.share.groups.members(group_id):
        return ErrorCode.NON_EMPTY_GROUP
    return ErrorCode.NONE
