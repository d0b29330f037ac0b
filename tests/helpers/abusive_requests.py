"""Valid-looking requests of an abusive client (issue 20, findings 2, 3, 5 and 6), for the wire fuzzer's
corpus; tests/reliability/test_abusive_requests.py sends them at full size."""

from __future__ import annotations

from protocol import frames
from protocol.records import build_batch


def _request(api: str, version: int, body: dict) -> bytes:
    return frames.encode_request(api, version, 1, "abuser", body)


def _produce(topic: str, records: bytes) -> bytes:
    return _request("Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})


def _metadata(names: list[str], auto_create: bool) -> bytes:
    return _request("Metadata", 9, {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": auto_create,
                                    "include_cluster_authorized_operations": False,
                                    "include_topic_authorized_operations": False})


def abusive_requests(topic: str) -> list[bytes]:
    """The issue's patterns, smaller: old CreateTime, a new producer id, a topic named 500 times,
    unknown names to auto-create, a partition named 10,000 times, the broker named 5,000 times."""
    return [
        _produce(topic, build_batch([(None, b"old")], timestamp_ms=1)),
        _produce(topic, build_batch([(None, b"pid")], producer_id=123_456, producer_epoch=0, base_sequence=0)),
        _metadata([topic] * 500, False),
        _metadata([f"abused-{i}" for i in range(50)], True),
        _request("ListOffsets", 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": 1}] * 10_000}]}),
        _request("DescribeConfigs", 4, {"resources": [{"resource_type": 4, "resource_name": "1",
                                                       "configuration_keys": None}] * 5_000,
                                        "include_synonyms": False, "include_documentation": False}),
    ]
