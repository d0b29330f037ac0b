"""Shared by the offset APIs: request topics split by existence, and per-partition answers."""

from broker.errors import ErrorCode


def requested_partitions(broker, topics: list[dict]) -> tuple[list[tuple[tuple[str, int], dict]], dict]:
    """([((topic, partition), request entry) that exist], {(topic, partition): UNKNOWN_TOPIC_OR_PARTITION})."""
    known, unknown = [], {}
    for topic in topics:
        for p in topic["partitions"]:
            tp = (topic["name"], p["partition_index"])
            if broker.logs.log(*tp) is None:
                unknown[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append((tp, p))
    return known, unknown


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
