"""The copy app gets past a producer that librdkafka leaves hung in send_offsets_to_transaction.

librdkafka 2.16 (issues #5511 and #5456 upstream) drops the handle of a broker
that left the cluster's metadata (killed, or paused past its session) even
while that broker is cached as a group's coordinator; the next
send_offsets_to_transaction then waits forever for that handle to connect,
past its timeout, and sends no TxnOffsetCommit anywhere. No broker answer is
missing: Kafka's own Metadata lists only the live brokers too. The copy app
in verify.workloads (and the fault loops running it) hung like this in an
open transaction the coordinator aborted at its timeout. Its commit path now
gives a hung call up after HUNG_AFTER seconds and goes on with a new producer
of the same transactional.id, whose init_transactions fences the hung one.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cluster.test_coordinator_failover import coordinator, read_committed
from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from verify import workloads

pytestmark = pytest.mark.timeout(180)


def test_commit_gives_up_a_hung_producer_and_the_next_one_commits(start_cluster, monkeypatch):
    monkeypatch.setattr(workloads, "HUNG_AFTER", 15)
    cluster = start_cluster(3, etcd_session_timeout_ms=3000, min_insync_replicas=2)
    for topic in ("in", "out"):
        cluster.create_topic(topic, partitions=1, replication_factor=3)
    group, transactional_id = "copier", "copier-0"
    config = {**workloads.CLIENT, **workloads.TRANSACTIONAL, "bootstrap.servers": cluster.bootstrap,
              "transactional.id": transactional_id}
    consumer = Consumer({**workloads.CLIENT, "bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.subscribe(["in"])
    cluster.wait_until(lambda: consumer.poll(0.5) is None and bool(consumer.assignment()), 60, "an assignment")
    producer = Producer(config)
    producer.init_transactions(30)
    offsets = [TopicPartition("in", 0, 0)]

    def copy(producer: Producer, value: bytes) -> str:
        producer.begin_transaction()
        producer.produce("out", value, partition=0)
        return workloads._commit_consumed(producer, consumer, offsets)

    assert copy(producer, b"before") == workloads.COMMIT  # the producer caches the group's coordinator
    victim = coordinator(cluster, "__consumer_offsets", group)
    cluster.brokers[victim].kill()
    cluster.wait_until(lambda: victim not in cluster.metadata().brokers, 30, f"broker {victim} out of the metadata")
    producer.list_topics(timeout=10)  # a metadata answer without it: librdkafka drops its handle
    cluster.brokers[victim].restart()
    cluster.wait_for_brokers(3, 60)

    started = time.monotonic()
    try:
        outcome = copy(producer, b"hung")
    except workloads.ProducerHung:  # what librdkafka 2.16 does
        outcome = None
    assert time.monotonic() - started < workloads.HUNG_AFTER + workloads.CALL_TIMEOUT
    # the copy app's way on: a new producer of the id fences the hung one and aborts its transaction
    successor = Producer(config)
    workloads._retry(successor.init_transactions, workloads.CALL_TIMEOUT)
    assert copy(successor, b"after") == workloads.COMMIT
    expected = [b"before", b"after"] if outcome is None else [b"before", b"hung", b"after"]
    assert read_committed(cluster.bootstrap, "out", len(expected)) == expected
    consumer.close()
