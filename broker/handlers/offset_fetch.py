"""OffsetFetch: a group's committed offsets (several groups per request from v8).

require_stable (v7+) turns offsets that an open transaction has rewritten
into UNSTABLE_OFFSET_COMMIT, so the client retries once the transaction ends.
"""

API = "OffsetFetch"
VERSIONS = (1, 9)


def _topics(broker, group_id: str, topics: list[dict] | None, require_stable: bool) -> list[dict]:
    wanted = None if topics is None else [(t["name"], p) for t in topics for p in t["partition_indexes"]]
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), committed, error in broker.groups.fetch_offsets(group_id, wanted, require_stable):
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": committed.offset if committed else -1,
            "committed_leader_epoch": committed.leader_epoch if committed else -1,
            "metadata": committed.metadata if committed else "",
            "error_code": error,
        })
    return [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]


def handle(broker, request, header) -> dict:
    stable = request["require_stable"]
    if header.api_version >= 8:
        groups = [
            {"group_id": g["group_id"], "topics": _topics(broker, g["group_id"], g["topics"], stable), "error_code": 0}
            for g in request["groups"]
        ]
        return {"throttle_time_ms": 0, "groups": groups}
    return {"throttle_time_ms": 0, "topics": _topics(broker, request["group_id"], request["topics"], stable), "error_code": 0}
