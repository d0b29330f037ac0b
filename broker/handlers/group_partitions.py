"""Shared by the offset APIs: request topics split by existence, and per-partition answers."""

from broker.errors import ErrorCode
from broker.security.authorizer import GROUP, TOPIC, TRANSACTIONAL_ID


def requested_partitions(broker, topics: list[dict], header) -> tuple[list[tuple[tuple[str, int], dict]], dict]:
    """([((topic, partition), request entry) that exist and may be read],
    {(topic, partition): TOPIC_AUTHORIZATION_FAILED or UNKNOWN_TOPIC_OR_PARTITION})."""
    known, unknown = [], {}
    for topic in topics:
        readable = broker.authorizer.authorize(header, "Read", TOPIC, topic["name"])
        for p in topic["partitions"]:
            tp = (topic["name"], p["partition_index"])
            if not readable:
                unknown[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif broker.logs.log(*tp) is None:
                unknown[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append((tp, p))
    return known, unknown


def group_refusal(broker, header, request) -> ErrorCode | None:
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED if the request may not go ahead:
    Write on its transactional id (if it has one), Read on its group."""
    authorizer = broker.authorizer
    txn_id = request.get("transactional_id")
    if txn_id is not None and not authorizer.authorize(header, "Write", TRANSACTIONAL_ID, txn_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not authorizer.authorize(header, "Read", GROUP, request["group_id"]):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


def partition_errors(topics: list[dict], errors: dict) -> list[dict]:
    """The request's topics and partitions, in its order, each with its error code."""
    return [
        {
            "name": topic["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": errors[(topic["name"], p["partition_index"])]}
                for p in topic["partitions"]
            ],
        }
        for topic in topics
    ]
