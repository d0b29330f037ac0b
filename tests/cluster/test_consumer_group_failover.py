"""A KIP-848 consumer group (group.protocol=consumer) through its coordinator's kill -9 in a cluster.

The group's records are in its partition of __consumer_offsets, replicated like
any other; the partition's next leader loads them and the members heartbeat on
at their epochs: no rebalance, no commit lost, nothing consumed again once its
commit was acknowledged.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.coordinator.internal_topics import partition_for
from helpers.cluster import CLUSTER_DEFAULTS, start_cluster  # noqa: F401 (fixture)
from helpers.consumer_protocol import Member, consumed, consumed_again_after_commit, describe, produce

pytestmark = pytest.mark.timeout(180)


def test_consumer_group_survives_its_coordinator_kill(start_cluster):
    # sessions outlast the failover (etcd session 4 s, then the partition's load)
    cluster = start_cluster(3, min_insync_replicas=2, group_consumer_heartbeat_interval_ms=500,
                            group_consumer_min_heartbeat_interval_ms=100, group_consumer_min_session_timeout_ms=6000,
                            group_consumer_session_timeout_ms=30000)
    cluster.create_topic("cg-events", partitions=2, replication_factor=3)
    produce(cluster.bootstrap, "cg-events", 2, 100)
    members = [Member(cluster.bootstrap, "g-failover", ["cg-events"]) for _ in range(2)]
    for m in members:
        m.start()
    try:
        cluster.wait_until(lambda: len(set(consumed(*members))) >= 200 and all(m.snapshot()[0] for m in members), 60,
                           "both members consuming")
        partition = partition_for("g-failover", CLUSTER_DEFAULTS["offsets.topic.num.partitions"])
        victim = cluster.leader("__consumer_offsets", partition)
        before = describe(cluster.brokers[victim].port, "g-failover")
        cluster.brokers[victim].kill()
        produce(cluster.bootstrap, "cg-events", 2, 100, start=100)
        cluster.wait_until(lambda: {(p, o) for _, p, o in consumed(*members)} >= {(p, o) for p in range(2)
                                                                                  for o in range(200)},
                           90, "every record consumed after the kill")
        time.sleep(1)  # a record consumed again would show up now
        successor = cluster.leader("__consumer_offsets", partition)
        after = describe(cluster.brokers[successor].port, "g-failover")
        assert successor not in (victim, -1)
        assert not consumed_again_after_commit(*members)
        # loaded by the successor: the same members at the same group epoch, no rebalance
        assert after["group_epoch"] == before["group_epoch"], (before, after)
        assert sorted(m["member_id"] for m in after["members"]) == sorted(m["member_id"] for m in before["members"])
    finally:
        for m in members:
            m.stop()
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-failover", "enable.auto.commit": False})
    try:
        committed = check.committed([TopicPartition("cg-events", p) for p in range(2)], timeout=30)
    finally:
        check.close()
    assert [tp.offset for tp in committed] == [200, 200]
