"""A cluster's background tasks fail (MOLDAU_FAULT_FAIL_TASKS_FILE) and go on. On every broker the etcd session
keep-alive and watch, the controller's loop and its leader rebalancing, the ISR check, the high watermark
checkpoint and every replica fetcher fail at once; each failure is logged once with its traceback and counted,
and then: replacement fetchers replicate (acks=all with min.insync.replicas=3), the watch brings a new topic to
every broker, sessions stay alive, checkpoints are written, a leader shrinks the ISR of a slow follower, the
controller elects new leaders when a broker dies -- while the new coordinator's load of __consumer_offsets
fails once and is retried, so its groups are served -- and rebalances leadership back when it returns."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from broker.coordinator.internal_topics import partition_for
from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.supervision import ENV, FAIL_FILE, failures_logged, request_failures, restarts, wait_failed

pytestmark = pytest.mark.timeout(240)

SLOW_DISK = "slow-disk"
LOOPS = ["etcd-session", "etcd-watch", "controller-event-thread", "auto-leader-rebalance-task", "isr-expiration",
         "highwatermark-checkpoint"]


def test_cluster_background_tasks_restart_after_a_failure_and_do_their_work(start_cluster):
    env = {**ENV, "MOLDAU_FAULT_SLOW_DISK_FILE": SLOW_DISK}
    cluster = start_cluster(3, metrics=True, env={n: env for n in (1, 2, 3)}, replica_lag_time_max_ms=3000,
                            replica_high_watermark_checkpoint_interval_ms=300,
                            leader_imbalance_check_interval_seconds=1)
    nodes = sorted(cluster.brokers)
    cluster.create_topic("supervised", partitions=3, replication_factor=3, min_insync_replicas=3)
    leases = cluster.registrations()

    names = {n: LOOPS + [f"ReplicaFetcherThread-0-{other}" for other in nodes if other != n] for n in nodes}
    since = {n: request_failures(cluster.brokers[n], names[n]) for n in nodes}
    for n in nodes:
        log = wait_failed(cluster.brokers[n], names[n], since[n])
        failed, tracebacks = failures_logged(log)
        assert sorted(failed) == sorted(names[n]) and tracebacks == len(names[n]), log
        assert restarts(cluster.metrics_ports[n]) == {name: 1 for name in names[n]}

    # replacement fetchers replicate: acks=all needs all three replicas of every partition
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2})
    answers = []
    for i in range(30):
        p.produce("supervised", b"m%d" % i, partition=i % 3, on_delivery=lambda error, _: answers.append(error))
    assert p.flush(60) == 0 and answers == [None] * 30, answers

    # the watch brings what etcd changes to every broker
    cluster.create_topic("after-the-failures", partitions=1, replication_factor=3)
    for n in nodes:
        topics = _metadata(cluster.brokers[n].bootstrap).topics
        assert "after-the-failures" in topics and topics["after-the-failures"].partitions[0].leader >= 0

    # checkpoints: every replica's high watermark of the produced records is written
    total = {n: lambda n=n: _checkpointed(cluster.brokers[n], "supervised") for n in nodes}
    cluster.wait_until(lambda: all(total[n]() == 30 for n in nodes), 30, "high watermark checkpoints")

    # the ISR check: a follower too slow to fetch leaves the ISR of the leader's partition
    leader = cluster.leader("supervised", 0)
    slow = next(n for n in nodes if n != leader)
    (cluster.brokers[slow].data_dir / SLOW_DISK).write_text("6000")
    try:
        cluster.wait_for_isr("supervised", 0, set(nodes) - {slow}, timeout=30)
    finally:
        (cluster.brokers[slow].data_dir / SLOW_DISK).unlink()

    # the sessions were kept alive throughout
    assert cluster.registrations() == leases
    for n in nodes:
        assert "left the cluster" not in cluster.brokers[n].log_since(since[n])

    # the controller elects when a broker dies; the new coordinator's first load fails and is retried
    group = next(g for g in (f"group-{i}" for i in range(1000)) if partition_for(g, 3) == 0)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("supervised", 0, 3)], asynchronous=False)  # creates the topic
        offsets_leader = cluster.wait_for_leader("__consumer_offsets", 0)
        heirs = [n for n in nodes if n != offsets_leader]
        load = "__consumer_offsets-0-load"
        marks = {n: request_failures(cluster.brokers[n], [load]) for n in heirs}
        cluster.wait_until(lambda: not any((cluster.brokers[n].data_dir / FAIL_FILE).exists() for n in heirs), 10,
                           "the brokers to take the fault")
        cluster.brokers[offsets_leader].kill()
        heir = cluster.wait_for_leader("__consumer_offsets", 0, not_in=(offsets_leader,))
        wait_failed(cluster.brokers[heir], [load], marks[heir])
        assert restarts(cluster.metrics_ports[heir])[load] == 1
        partition = [TopicPartition("supervised", 0)]
        assert [tp.offset for tp in consumer.committed(partition, timeout=30)] == [3]  # loaded at last
        consumer.commit(offsets=[TopicPartition("supervised", 0, 7)], asynchronous=False)
        assert [tp.offset for tp in consumer.committed(partition, timeout=30)] == [7]
    finally:
        consumer.close()

    # the controller's rebalancing: the preferred replica back, it leads again
    cluster.brokers[offsets_leader].start()
    cluster.wait_until(lambda: cluster.leader("__consumer_offsets", 0) == offsets_leader, 60,
                       "the preferred leader to lead again")


def _metadata(bootstrap: str):
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)


def _checkpointed(broker, topic: str) -> int:
    """The sum of the topic's high watermarks in the broker's replication-offset-checkpoint."""
    path = broker.data_dir / "replication-offset-checkpoint"
    text = path.read_text() if path.exists() else ""
    return sum(int(m[1]) for m in re.finditer(rf"^{re.escape(topic)} \d+ (\d+)$", text, re.M))
