"""DescribeShareGroupOffsets: each initialized share partition's start offset (SPSO) and, v1 (KIP-1226), its
lag -- the records at or past the start not yet acknowledged or archived -- from ReadShareGroupStateSummary."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP, TOPIC

API = Api("DescribeShareGroupOffsets", (0, 1), acl=IN_HANDLER, enabled_by="group.share.enable")


async def handle(broker, request, header) -> dict:
    await broker.share.persister.loaded()
    return {"throttle_time_ms": 0, "groups": [await _group(broker, header, g) for g in request["groups"]]}


async def _group(broker, header, wanted: dict) -> dict:
    group_id = wanted["group_id"]
    answer = {"group_id": group_id, "topics": [], "error_code": 0, "error_message": None}
    if not broker.authorizer.authorize(header, "Describe", GROUP, group_id):
        answer["error_code"] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return answer
    if error := broker.groups.coordinator_error(group_id):
        answer["error_code"] = error
        return answer
    group = broker.share.groups.groups.get(group_id)
    if group is None:
        answer["error_code"], answer["error_message"] = ErrorCode.GROUP_ID_NOT_FOUND, f"{group_id} is not a share group"
        return answer
    offsets = await broker.share.partitions.start_offsets(group_id, broker.share.groups.share_keys(group))
    by_topic: dict[str, dict] = {}
    for key, (start, lag) in offsets.items():
        topic = broker.logs.topic_by_id(key.topic_id)
        if topic is not None:
            by_topic.setdefault(topic.name, {})[key.partition] = (start, lag)
    names = sorted(by_topic) if wanted["topics"] is None else [t["topic_name"] for t in wanted["topics"]]
    for name in names:
        topic = broker.logs.topic(name)
        if topic is None or not broker.authorizer.authorize(header, "Describe", TOPIC, name):
            continue  # (Kafka leaves out the topics it cannot describe)
        have = by_topic.get(name, {})
        partitions = sorted(have) if wanted["topics"] is None else next(
            t["partitions"] for t in wanted["topics"] if t["topic_name"] == name)
        answer["topics"].append({"topic_name": name, "topic_id": topic.topic_id, "partitions": [
            {"partition_index": p, "start_offset": have.get(p, (-1, -1))[0], "leader_epoch": -1,
             "lag": have.get(p, (-1, -1))[1], "error_code": 0, "error_message": None} for p in partitions]})
    return answer
