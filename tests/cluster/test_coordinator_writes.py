"""A coordinator's state write takes effect only once it is committed (acks=all).

Three brokers and an etcd (helpers.cluster). A follower of the group's
__consumer_offsets partition is paused (SIGSTOP) so that nothing the
coordinator appends can be committed; what it could not commit must not be
answered by it either, since the next coordinator may not have it.
"""

from __future__ import annotations

import os
import signal

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.coordinator.internal_topics import partition_for
from helpers.cluster import CLUSTER_DEFAULTS, start_cluster  # noqa: F401 (fixture)
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(120)

OFFSETS_PARTITIONS = CLUSTER_DEFAULTS["offsets.topic.num.partitions"]
COORDINATOR_NOT_AVAILABLE, UNSTABLE_OFFSET_COMMIT = 15, 88


def commit(port: int, group: str, topic: str, offset: int) -> int:
    """The error of a simple commit (no member, no generation) of ``offset`` for partition 0."""
    with WireClient(port, timeout=30) as c:
        r = c.request("OffsetCommit", 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                          "topics": [{"name": topic, "partitions": [
                                              {"partition_index": 0, "committed_offset": offset}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def fetch(port: int, group: str, topic: str, require_stable: bool = False) -> tuple[int, int]:
    """(error code, committed offset) of partition 0."""
    with WireClient(port) as c:
        r = c.request("OffsetFetch", 7, {"group_id": group, "require_stable": require_stable,
                                         "topics": [{"name": topic, "partition_indexes": [0]}]})
    (p,) = r["topics"][0]["partitions"]
    return r["error_code"] or p["error_code"], p["committed_offset"]


def test_an_offset_commit_that_is_not_committed_does_not_take_effect(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2, offsets_commit_timeout_ms=1000)
    cluster.create_topic("consumed", partitions=1, replication_factor=3)
    group = "uncommitted"
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        assert probe.committed([TopicPartition("consumed", 0)], timeout=30)[0].offset < 0  # creates the topic
    finally:
        probe.close()
    cluster.wait_until(lambda: cluster.full_isr("__consumer_offsets", OFFSETS_PARTITIONS, 3), 30, "__consumer_offsets")
    partition = cluster.partition("__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
    coordinator = cluster.brokers[partition.leader].port
    # (offsets.commit.timeout.ms is short: on a loaded machine a commit may need another try)
    cluster.wait_until(lambda: commit(coordinator, group, "consumed", 10) == 0, 30, "a commit")
    assert fetch(coordinator, group, "consumed") == (0, 10)

    # one follower stops (well within its session and replica.lag.time.max.ms): the high watermark stays
    follower = cluster.brokers[next(r for r in partition.replicas if r != partition.leader)]
    os.kill(follower.pid, signal.SIGSTOP)
    try:
        assert commit(coordinator, group, "consumed", 20) == COORDINATOR_NOT_AVAILABLE  # offsets.commit.timeout.ms
        assert fetch(coordinator, group, "consumed") == (0, 10)
    finally:
        os.kill(follower.pid, signal.SIGCONT)

    # a commit not yet committed is unstable for require_stable, and in effect once it is
    cluster.wait_until(lambda: commit(coordinator, group, "consumed", 30) == 0, 30, "a commit once resumed")
    assert fetch(coordinator, group, "consumed", require_stable=True) == (0, 30)
