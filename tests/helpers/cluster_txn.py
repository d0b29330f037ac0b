"""Transactions in a test cluster (helpers.cluster): who coordinates, partitions placed on chosen
leaders, transactions with confluent-kafka, and what consumers read."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from helpers.wire import WireClient

NONE = 0
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator's key types
DEADLINE_S = 40


def find_coordinator(cluster, key: str, key_type: int = TRANSACTION_KEY) -> int:
    """The node the cluster names as the coordinator of a transactional id (or group)."""
    def ask() -> int:
        broker = next(b for b in cluster.brokers.values() if b.alive())
        with WireClient(broker.port) as c:
            (found,) = c.request("FindCoordinator", 4, {"key_type": key_type, "coordinator_keys": [key]})[
                "coordinators"]
        return found["node_id"] if found["error_code"] == NONE else -1

    cluster.wait_until(lambda: ask() >= 0, 30, f"a coordinator for {key}")
    return ask()


def create_placed(cluster, name: str, replicas: list[list[int]]) -> None:
    """A topic whose partition i has replicas[i] (the first leads)."""
    broker = next(b for b in cluster.brokers.values() if b.alive())
    with WireClient(broker.port) as c:
        r = c.request("CreateTopics", 5, {"timeout_ms": 30000, "validate_only": False, "topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": i, "broker_ids": ids} for i, ids in enumerate(replicas)]}]})
    assert r["topics"][0]["error_code"] == NONE, r
    cluster.wait_until(lambda: cluster.full_isr(name, len(replicas), len(replicas[0])), 30, f"{name} replicated")
    assert [cluster.leader(name, i) for i in range(len(replicas))] == [ids[0] for ids in replicas]


def consume(cluster, tps: list[tuple[str, int]], expected: int, isolation: str = "read_uncommitted",
            timeout: float = DEADLINE_S, settle: float = 1.0, conf: dict | None = None) -> list[tuple[str, int, bytes]]:
    """(topic, partition, value) of what a consumer (with ``conf``) reads from offset 0: until ``expected``
    records (then ``settle`` s more, so a duplicate would show) or the timeout."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False, "broker.address.family": "v4",
                         "topic.metadata.refresh.interval.ms": 1000, **(conf or {})})
    try:
        consumer.assign([TopicPartition(t, i, 0) for t, i in tps])
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.append((m.topic(), m.partition(), m.value()))
            if len(got) >= expected:
                deadline = min(deadline, time.monotonic() + settle)
        return got
    finally:
        consumer.close()


def txn_producer(cluster, transactional_id: str, **conf) -> Producer:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                  "broker.address.family": "v4", "transaction.timeout.ms": 60000, **conf})
    p.init_transactions(DEADLINE_S)
    return p


def transaction(p: Producer, tps: list[tuple[str, int]], label: str, count: int, commit: bool = True,
                before_end=None) -> list[tuple[str, int, bytes]]:
    """One transaction of ``count`` records per partition; its records as (topic, partition, value)."""
    p.begin_transaction()
    records = [(t, i, f"{label}-{t}-{i}-{n}".encode()) for t, i in tps for n in range(count)]
    for topic, index, value in records:
        p.produce(topic, value, partition=index)
    assert p.flush(DEADLINE_S) == 0
    if before_end is not None:
        before_end()
    end = p.commit_transaction if commit else p.abort_transaction
    for attempt in range(3):  # librdkafka: a call that timed out (a broker hangs) resumes when made again
        try:
            end(DEADLINE_S)
            break
        except KafkaException as exc:
            if attempt == 2 or not exc.args[0].retriable():
                raise
    return records
