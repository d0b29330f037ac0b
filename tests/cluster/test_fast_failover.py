"""Failover at the default session timeout: a crashed broker (kill -9) is fenced by its peers' confirmed
refusals long before its etcd session would expire; a stopped one (SIGSTOP) refuses nothing and is left to
the session timeout. The bounds are generous (a loaded machine): far below the 9 s session, not the
benchmark's targets (bench/cluster.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from helpers.cluster import start_cluster  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(180)

SESSION_MS = 9000  # the default etcd.session.timeout.ms (the cluster helper shortens it)
FAR_BELOW_SESSION_S = 5.0


def first_ack_s(bootstrap: str, topic: str, partition: int, started: float, timeout: float = 60) -> float:
    """Seconds from ``started`` to the first acks=all acknowledgement of a record sent to the partition."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "message.timeout.ms": 2000,
                  "retry.backoff.ms": 20, "retry.backoff.max.ms": 50, "topic.metadata.refresh.interval.ms": 100})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        acked = []
        p.produce(topic, b"x", partition=partition, on_delivery=lambda err, m: acked.append(err is None))
        p.flush(3)
        if acked == [True]:
            return time.monotonic() - started
    raise AssertionError(f"no acknowledgement on {topic}-{partition} within {timeout}s")


def test_a_killed_leader_is_fenced_by_its_peers_long_before_its_session_ends(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2, etcd_session_timeout_ms=SESSION_MS)
    victim = 1
    a, b = 2, 3
    # partition 0 led by the victim, partition 1 only followed by it
    admin = cluster.admin()  # kept alive until the result is in
    admin.create_topics([NewTopic("crash", 2, replica_assignment=[[victim, a, b], [a, victim, b]])])["crash"].result(30)
    cluster.wait_until(lambda: cluster.full_isr("crash", 2, 3), 30, "crash fully replicated")
    first_ack_s(cluster.bootstrap, "crash", 0, time.monotonic())
    killed = time.monotonic()
    cluster.brokers[victim].kill()
    led = first_ack_s(f"127.0.0.1:{cluster.brokers[a].port}", "crash", 0, killed)
    assert led < FAR_BELOW_SESSION_S, f"first ack on a partition the killed broker led after {led:.1f}s"
    followed = first_ack_s(f"127.0.0.1:{cluster.brokers[a].port}", "crash", 1, killed)
    assert followed < FAR_BELOW_SESSION_S, f"first ack on a partition it followed after {followed:.1f}s"
    assert victim not in cluster.registrations()
    assert victim not in cluster.partition("crash", 0).isrs and victim not in cluster.partition("crash", 1).isrs
    fenced = cluster.brokers[a].log_since_start() + cluster.brokers[b].log_since_start()
    assert f"broker {victim} refuses connections" in fenced, "fenced by something else than its peers"
    cluster.brokers[victim].start()  # back: it rejoins every ISR
    cluster.wait_until(lambda: cluster.full_isr("crash", 2, 3), 30, "crash fully replicated again")


def test_a_stopped_broker_is_not_fenced_on_suspicion(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2, etcd_session_timeout_ms=SESSION_MS)
    cluster.create_topic("stopped", partitions=1, replication_factor=3)
    leader = cluster.leader("stopped")
    pid = cluster.brokers[leader].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(4)  # its listener still accepts (the kernel does): nothing refuses, its session stands
        assert leader in cluster.registrations()
    finally:
        os.kill(pid, signal.SIGCONT)
