"""Replica fetchers keep incremental fetch sessions (KIP-227) with their leaders: after one full fetch they
name only partitions whose position moved, and leaders answer only partitions with news. Three brokers, real
etcd, confluent-kafka clients; the leaders' Prometheus endpoints count the incremental fetches they serve.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, TopicPartition

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.wire import WireClient
from test_cluster_failover import producer

pytestmark = pytest.mark.timeout(240)

INCREMENTAL = "moldau_fetch_incremental_requests_total"
SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
NOT_LEADER_OR_FOLLOWER = 6


def produce_to_each(cluster, topic: str, partitions: int, tag: str) -> None:
    """One record per partition, acks=all: every one must be acknowledged."""
    p = producer(cluster, acks="all")
    errors = []
    for i in range(partitions):
        p.produce(topic, f"{tag}-{i}".encode(), partition=i, on_delivery=lambda err, m: errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0, "records still unanswered"
    assert errors == [None] * partitions


def replicas_identical(cluster, topic: str, partitions: int) -> bool:
    return all(len({cluster.log_bytes(n, topic, i) for n in cluster.brokers}) == 1 for i in range(partitions))


def isr_full(cluster, topic: str, replicas: int) -> bool:
    parts = cluster.metadata(topic).topics[topic].partitions.values()
    return all(len(p.isrs) == replicas and p.leader >= 0 for p in parts)


def test_many_partitions_replicate_through_incremental_sessions_and_idle_followers_stay_in_sync(start_cluster):
    cluster = start_cluster(3, metrics=True, min_insync_replicas=2)
    topics = ["many-a", "many-b"]  # 200 partitions (one CreateTopics of 200 is over etcd's operations per txn)
    for topic in topics:
        cluster.create_topic(topic, partitions=100, replication_factor=3)

    def produce_round(tag: str) -> None:
        for topic in topics:
            produce_to_each(cluster, topic, 100, tag)
        cluster.wait_until(lambda: all(replicas_identical(cluster, t, 100) for t in topics), 60,
                           "byte-identical replicas")

    for round_ in range(3):
        produce_round(f"round{round_}")
    before = {n: cluster.metric(n, INCREMENTAL) for n in cluster.brokers}
    # idle for longer than replica.lag.time.max.ms (6 s): incremental fetches that name no partition still
    # tell each leader that its followers are caught up, so nobody leaves the ISR
    time.sleep(9)
    assert all(isr_full(cluster, t, 3) for t in topics)
    for n in cluster.brokers:
        assert cluster.metric(n, INCREMENTAL) > before[n] > 0, n
        assert cluster.metric(n, SESSIONS) == 2, n  # one per follower
    produce_round("after-idle")


def test_a_restarted_leader_gets_full_fetches_and_new_sessions(start_cluster):
    """The restarted broker knows none of the sessions its followers had: they start over with a full fetch
    (after a lost connection, or when it answers FETCH_SESSION_ID_NOT_FOUND) and replication goes on."""
    cluster = start_cluster(3, metrics=True, min_insync_replicas=2)
    cluster.create_topic("moved", partitions=12, replication_factor=3)
    produce_to_each(cluster, "moved", 12, "before")
    cluster.wait_until(lambda: replicas_identical(cluster, "moved", 12), 60, "byte-identical replicas")
    restarted = 1
    # (counted as answered: a follower's incremental fetch parks until the next append or its wait ends)
    cluster.wait_until(lambda: cluster.metric(restarted, INCREMENTAL) > 0, 30, "incremental fetches")
    cluster.brokers[restarted].stop()  # a controlled shutdown hands its leaderships over
    produce_to_each(cluster, "moved", 12, "while-away")
    cluster.brokers[restarted].start()
    cluster.wait_until(lambda: isr_full(cluster, "moved", 3), 60, "the restarted broker back in every ISR")
    preferred = [TopicPartition("moved", i) for i in range(12)
                 if cluster.partition("moved", i).replicas[0] == restarted]
    assert preferred
    admin = cluster.admin()  # kept alive until the result is in
    result = admin.elect_leaders(ElectionType.PREFERRED, preferred).result(30)
    assert all(error is None for error in result.values()), result
    cluster.wait_until(lambda: all(cluster.leader("moved", tp.partition) == restarted for tp in preferred), 30,
                       "the restarted broker leading again")
    produce_to_each(cluster, "moved", 12, "after")
    cluster.wait_until(lambda: replicas_identical(cluster, "moved", 12), 60, "byte-identical replicas")
    cluster.wait_until(lambda: cluster.metric(restarted, SESSIONS) == 2, 30, "both followers in a session")
    # (a session's first incremental fetch may still be parked: it counts once answered)
    cluster.wait_until(lambda: cluster.metric(restarted, INCREMENTAL) > 0, 30, "incremental fetches again")


def test_a_consumer_session_learns_that_its_partition_moved(start_cluster):
    """A client's session reads only partitions whose logs changed; a leadership that moves away is such a
    change: the next incremental fetch lists the partition with NOT_LEADER_OR_FOLLOWER, the other not at all."""
    cluster = start_cluster(2)
    with WireClient(cluster.brokers[1].port) as c:
        created = c.request("CreateTopics", 5, {"topics": [
            {"name": "led", "num_partitions": -1, "replication_factor": -1, "configs": [],
             "assignments": [{"partition_index": i, "broker_ids": [1, 2]} for i in (0, 1)]}],
            "timeout_ms": 30000, "validate_only": False})
        assert created["topics"][0]["error_code"] == 0
        cluster.wait_until(lambda: cluster.full_isr("led", 2, 2), 30, "led fully replicated")
        produce_to_each(cluster, "led", 2, "first")

        def fetch(session: int, epoch: int, offsets: dict[int, int]) -> dict:
            return c.request("Fetch", 12, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": session, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": "led", "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, o in offsets.items()]}]
                if offsets else []})

        def listed(response: dict) -> dict[int, int]:
            return {p["partition_index"]: p["error_code"] for t in response["responses"] for p in t["partitions"]}

        session = fetch(0, 0, {0: 0, 1: 0})["session_id"]
        assert session and listed(fetch(session, 1, {0: 1, 1: 1})) == {}
        moved = c.request("AlterPartitionReassignments", 0, {"timeout_ms": 30000, "topics": [
            {"name": "led", "partitions": [{"partition_index": 0, "replicas": [2, 1]}]}]})
        assert moved["responses"][0]["partitions"][0]["error_code"] == 0, moved
        cluster.wait_until(lambda: cluster.partition("led", 0).replicas == [2, 1], 30, "the new preferred leader")
        admin = cluster.admin()
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("led", 0)]).result(30)
        assert all(error is None for error in result.values()), result
        cluster.wait_until(lambda: cluster.leader("led", 0) == 2, 30, "broker 2 leading led-0")
        epoch, answers = 2, {}
        deadline = time.monotonic() + 30
        while not answers and time.monotonic() < deadline:  # broker 1 applies the new state from etcd
            answers = listed(fetch(session, epoch, {}))
            epoch += 1
            time.sleep(0.1)
        assert answers == {0: NOT_LEADER_OR_FOLLOWER}
