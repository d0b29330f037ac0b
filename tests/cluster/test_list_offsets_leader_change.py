"""KIP-207: ListOffsets(latest) never goes back across a leader change.

A new leader's high watermark is the one it had as a follower, which may trail what its predecessor
told clients; until it reaches the start of its leader epoch it answers OFFSET_NOT_AVAILABLE
(retriable). Leadership moves by ElectLeaders while an acks=all producer writes all along; every
answer to ListOffsets(latest), from whichever broker leads, is at least the largest told before.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer

from broker.errors import ErrorCode
from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.wire import WireClient

TOPIC = "moving"


def latest(client: WireClient, version: int = 7) -> tuple[int, int]:
    response = client.request("ListOffsets", version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    part = response["topics"][0]["partitions"][0]
    return part["error_code"], part["offset"]


def test_latest_offset_never_goes_back_when_elect_leaders_moves_leadership(start_cluster):
    cluster = start_cluster(3)
    with WireClient(cluster.brokers[1].port) as admin:
        created = admin.request("CreateTopics", 5, {
            "topics": [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]}], "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
        assert created["topics"][0]["error_code"] == 0
    cluster.wait_until(lambda: cluster.full_isr(TOPIC, 1, 3), 30, f"{TOPIC} fully replicated")

    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
        while not stop.is_set():
            producer.produce(TOPIC, b"x", partition=0)
            producer.poll(0.002)
        producer.flush(30)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    clients = {node: WireClient(b.port) for node, b in cluster.brokers.items()}
    told, answers, not_available = 0, 0, 0
    try:
        for preferred in (2, 3):
            order = [preferred] + [n for n in (1, 2, 3) if n != preferred]
            with WireClient(cluster.brokers[1].port) as admin:  # the preferred replica first, then elect it
                moved = admin.request("AlterPartitionReassignments", 0, {"timeout_ms": 30000, "topics": [
                    {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": order}]}]})
                assert moved["responses"][0]["partitions"][0]["error_code"] == 0, moved
                cluster.wait_until(lambda: cluster.partition(TOPIC).replicas == order
                                   and len(cluster.partition(TOPIC).isrs) == 3, 30, f"replicas {order}")
                elected = admin.request("ElectLeaders", 1, {"election_type": 0, "timeout_ms": 30000,
                                                            "topic_partitions": [{"topic": TOPIC, "partitions": [0]}]})
                error = elected["replica_election_results"][0]["partition_result"][0]["error_code"]
                assert error in (0, ErrorCode.ELECTION_NOT_NEEDED), elected
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:  # every broker in turn, as fast as they answer
                for node, client in clients.items():
                    version = 4 if answers % 2 else 7  # before v5 Kafka says LEADER_NOT_AVAILABLE instead
                    error, offset = latest(client, version)
                    if error == (ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE):
                        not_available += 1
                    elif error == 0:
                        assert offset >= told, f"broker {node} answered latest {offset} after {told} was told"
                        told, answers = offset, answers + 1
                    else:  # (never UNKNOWN_TOPIC_OR_PARTITION: every broker's view has the topic since its creation)
                        assert error == ErrorCode.NOT_LEADER_OR_FOLLOWER, (node, error)
            assert cluster.leader(TOPIC) == preferred
    finally:
        stop.set()
        writer.join(60)
        for client in clients.values():
            client.close()
    assert answers > 0 and told > 0
    print(f"{answers} answers, {not_available} OFFSET_NOT_AVAILABLE, latest {told}")

