"""OffsetForLeaderEpoch after a leader change (KIP-101/KIP-320), asked the way a consumer asks it when it
validates its position: the epoch of the last record it read.

A consumer that read under an epoch the new leader's cache no longer holds (the epoch wrote nothing there,
or its records were deleted) must be told where that epoch ended on this leader — Kafka answers the epoch
asked for and the start of the first epoch it knows — not (-1, -1): librdkafka takes that for "position
unknown" and resets the consumer to auto.offset.reset, so a transactional copy application re-reads the
partition from its start and copies it twice.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(300)


def end_offset_for(port: int, topic: str, epoch: int) -> tuple[int, int, int]:
    with WireClient(port) as c:
        response = c.request("OffsetForLeaderEpoch", 4, {"replica_id": -1, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}]}]})
    p = response["topics"][0]["partitions"][0]
    return p["error_code"], p["leader_epoch"], p["end_offset"]


def leader_epoch(port: int, topic: str) -> int:
    with WireClient(port) as c:
        response = c.request("Metadata", 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": topic}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
    return response["topics"][0]["partitions"][0]["leader_epoch"]


def test_an_epoch_older_than_the_leaders_first_is_answered_with_where_that_one_begins(start_cluster):
    cluster = start_cluster(3)
    cluster.create_topic("epochs", partitions=1, replication_factor=3)
    first = cluster.leader("epochs")
    cluster.brokers[first].stop()  # controlled shutdown: the next leader begins epoch 1 at offset 0
    leader = cluster.wait_for_leader("epochs", not_in=(first,))
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(3):
        producer.produce("epochs", f"r{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    port = cluster.brokers[leader].port
    epoch = leader_epoch(port, "epochs")
    assert epoch >= 1
    assert end_offset_for(port, "epochs", epoch) == (0, epoch, 3)
    # epoch 0 wrote nothing on this leader: it ended where the first epoch it knows began
    assert end_offset_for(port, "epochs", 0) == (0, 0, 0)
    assert end_offset_for(port, "epochs", -1) == (0, -1, -1)
