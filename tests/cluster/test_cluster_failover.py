"""Failures in a three-broker cluster (real etcd, three broker processes, confluent-kafka clients).

Sessions time out after 4 s (helpers.cluster), so each failover takes seconds.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition

from helpers.cluster import start_cluster  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(300)


def read_partition(bootstrap: str, topic: str, partition: int = 0, timeout: float = 30) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a read_uncommitted consumer sees, up to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        tp = TopicPartition(topic, partition, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([tp])
        got = []
        deadline = time.monotonic() + timeout
        while (not got or got[-1][0] < high - 1) and time.monotonic() < deadline and high > 0:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append((m.offset(), m.value()))
        return got
    finally:
        consumer.close()


def producer(cluster, **config) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 2,
                     **{k.replace("_", "."): v for k, v in config.items()}})


def produce(p: Producer, topic: str, values: list[bytes], timeout: float = 60) -> list:
    """(error, value, offset) per record, once all are answered."""
    results = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, m: results.append((err, m.value(), m.offset())))
        p.poll(0)
    assert p.flush(timeout) == 0, "records still unanswered"
    return results


def identical_replicas(cluster, topic: str, nodes) -> bool:
    return len({cluster.log_bytes(n, topic) for n in nodes}) == 1


def test_leader_killed_mid_stream_loses_no_acknowledged_record(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("stream", partitions=1, replication_factor=3)
    leader = cluster.leader("stream")
    p = producer(cluster, acks="all", enable_idempotence=True, message_timeout_ms=120000,
                 retry_backoff_ms=100)
    acked: list[tuple[bytes, int]] = []
    failed = []

    def on_delivery(err, m):
        (failed if err else acked).append((m.value(), m.offset()) if not err else (err, m.value()))

    total = 6000
    for i in range(total):
        p.produce("stream", f"{i:06d}".encode(), partition=0, on_delivery=on_delivery)
        p.poll(0)
        if i == total // 3:
            p.flush(30)
            cluster.brokers[leader].kill()  # kill -9 mid-stream, with records in flight
        if i % 500 == 0:
            time.sleep(0.05)
    assert p.flush(120) == 0
    assert failed == []
    new_leader = cluster.wait_for_leader("stream", not_in=(leader,))
    assert new_leader != leader
    values = [v for v, _ in acked]
    assert sorted(values) == [f"{i:06d}".encode() for i in range(total)]
    got = read_partition(cluster.bootstrap, "stream")
    stored = [v for _, v in got]
    assert len(stored) == len(set(stored)) == total, "a record is missing or stored twice"
    assert stored == sorted(stored), "records out of order"
    assert {v: o for v, o in acked} == {v: o for o, v in got}, "acknowledged offsets differ from stored ones"
    # the killed leader comes back, truncates what it alone had, catches up: three identical logs
    cluster.brokers[leader].start()
    cluster.wait_for_isr("stream", 0, {1, 2, 3}, timeout=60)
    cluster.wait_until(lambda: identical_replicas(cluster, "stream", (1, 2, 3)), 30, "identical replicas")


def test_two_of_three_down_refuses_acks_all_but_serves_acks_1_and_reads(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("quorum", partitions=1, replication_factor=3)
    leader = cluster.leader("quorum")
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), "quorum", [b"before"]))
    others = [n for n in cluster.brokers if n != leader]
    for n in others:
        cluster.brokers[n].kill()
    cluster.wait_for_isr("quorum", 0, {leader})
    refused = produce(producer(cluster, acks="all", message_timeout_ms=3000, retries=0), "quorum", [b"refused"])
    assert [e.code() for e, _, _ in refused] == [KafkaError.NOT_ENOUGH_REPLICAS]
    one = produce(producer(cluster, acks=1), "quorum", [b"acks-1"])
    assert [e for e, _, _ in one] == [None]
    assert [v for _, v in read_partition(cluster.bootstrap, "quorum")] == [b"before", b"acks-1"]
    cluster.brokers[others[0]].start()
    cluster.wait_for_isr("quorum", 0, {leader, others[0]}, timeout=60)
    again = produce(producer(cluster, acks="all", message_timeout_ms=30000), "quorum", [b"after"])
    assert [e for e, _, _ in again] == [None]
    assert [v for _, v in read_partition(cluster.bootstrap, "quorum")] == [b"before", b"acks-1", b"after"]


def _stale_replica_scenario(cluster, topic: str) -> tuple[int, list[int], list[bytes]]:
    """Replica S is killed, records are committed by the other two, both die, S alone returns.
    Returns (S, the two in-sync brokers, the committed values)."""
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader = cluster.leader(topic)
    stale = next(n for n in cluster.brokers if n != leader)
    in_sync = [n for n in cluster.brokers if n != stale]
    cluster.brokers[stale].kill()
    cluster.wait_for_isr(topic, 0, set(in_sync))
    values = [f"committed-{i}".encode() for i in range(20)]
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), topic, values))
    for n in in_sync:
        cluster.brokers[n].kill()
    cluster.brokers[stale].start()
    return stale, in_sync, values


def test_no_unclean_election_keeps_the_partition_offline_until_an_isr_member_returns(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2)
    stale, in_sync, values = _stale_replica_scenario(cluster, "clean")
    cluster.wait_until(lambda: cluster.partition("clean") is not None and cluster.partition("clean").leader == -1,
                       30, "the partition offline")
    time.sleep(3)  # the controller had time to act: still offline, the stale replica was not elected
    assert cluster.leader("clean") == -1
    # the ISR kept its last members (the controller may have dropped the one that died first)
    isr = cluster.partition("clean").isrs
    assert isr and set(isr) <= set(in_sync)
    last_in_sync = isr[0]
    cluster.brokers[last_in_sync].start()
    assert cluster.wait_for_leader("clean") == last_in_sync
    assert [v for _, v in read_partition(cluster.bootstrap, "clean")] == values


def test_unclean_election_elects_the_stale_replica_and_says_what_was_lost(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2, unclean_leader_election_enable="true")
    stale, in_sync, values = _stale_replica_scenario(cluster, "unclean")
    assert cluster.wait_for_leader("unclean", not_in=in_sync) == stale
    line = cluster.brokers[stale].wait_for_log(r"unclean-0: elected by unclean leader election", timeout=30)
    assert "log ends at offset 0" in line  # the stale replica has none of the 20 committed records
    lost = set(values) - {v for _, v in read_partition(cluster.bootstrap, "unclean")}
    assert lost == set(values), f"lost by the unclean election: {sorted(lost)}"
    # writes go on at the stale replica's log end; a returning old ISR member truncates its tail to match
    assert all(e is None for e, _, _ in produce(producer(cluster, acks=1), "unclean", [b"after-unclean"]))
    cluster.brokers[in_sync[0]].start()
    cluster.wait_for_isr("unclean", 0, {stale, in_sync[0]}, timeout=60)
    cluster.wait_until(lambda: identical_replicas(cluster, "unclean", (stale, in_sync[0])), 30, "identical replicas")
    assert [v for _, v in read_partition(cluster.bootstrap, "unclean")] == [b"after-unclean"]


def test_leader_with_unreplicated_records_truncates_them_when_it_rejoins(start_cluster):
    cluster = start_cluster(3, replica_fetch_wait_max_ms=100)
    cluster.create_topic("diverge", partitions=1, replication_factor=3)
    leader = cluster.leader("diverge")
    followers = [n for n in cluster.brokers if n != leader]
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), "diverge", [b"shared"]))
    # followers paused (shorter than the session and lag timeouts, so they stay in the ISR): the leader
    # appends records nobody copies, then dies
    for n in followers:
        os.kill(cluster.brokers[n].pid, signal.SIGSTOP)
    # the fetches the followers had parked at the leader end (replica.fetch.wait.max.ms) before the append:
    # no answer to a paused follower can carry the records
    time.sleep(1)
    try:
        lonely = produce(Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": 1}), "diverge",
                         [b"unreplicated-1", b"unreplicated-2"], timeout=10)
        assert [e for e, _, _ in lonely] == [None, None]
        cluster.brokers[leader].kill()
    finally:
        for n in followers:
            os.kill(cluster.brokers[n].pid, signal.SIGCONT)
    new_leader = cluster.wait_for_leader("diverge", not_in=(leader,))
    assert new_leader in followers
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), "diverge", [b"new-1", b"new-2", b"new-3"]))
    cluster.brokers[leader].start()
    cluster.brokers[leader].wait_for_log(r"diverge-0: truncated the divergent tail", timeout=60)
    cluster.wait_for_isr("diverge", 0, {1, 2, 3}, timeout=60)
    cluster.wait_until(lambda: identical_replicas(cluster, "diverge", (1, 2, 3)), 30, "identical replicas")
    assert [v for _, v in read_partition(cluster.bootstrap, "diverge")] == [b"shared", b"new-1", b"new-2", b"new-3"]


def test_acks_all_waits_for_the_isr_without_holding_up_others(start_cluster):
    cluster = start_cluster(3, replica_fetch_wait_max_ms=100)
    cluster.create_topic("waits", partitions=1, replication_factor=3)
    leader = cluster.leader("waits")
    followers = [n for n in cluster.brokers if n != leader]
    for n in followers:  # paused for less than the session and lag timeouts: still in the ISR
        os.kill(cluster.brokers[n].pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        started = time.monotonic()
        waiting = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "all", "retries": 0,
                            "request.timeout.ms": 1500, "message.timeout.ms": 1500})
        results = []
        waiting.produce("waits", b"uncommitted", partition=0, on_delivery=lambda err, m: results.append(err))
        waiting.poll(0.3)
        # meanwhile the leader answers others: an acks=1 write and a metadata request
        assert [e for e, _, _ in produce(Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap,
                                                   "acks": 1}), "waits", [b"acks-1"], timeout=5)] == [None]
        waiting.flush(10)
        assert len(results) == 1 and results[0] is not None, "acks=all answered without its followers"
        assert results[0].code() in (KafkaError.REQUEST_TIMED_OUT, KafkaError._MSG_TIMED_OUT)
        assert time.monotonic() - started >= 1.0
    finally:
        for n in followers:
            os.kill(cluster.brokers[n].pid, signal.SIGCONT)
    done = produce(producer(cluster, acks="all"), "waits", [b"committed"], timeout=30)
    assert [e for e, _, _ in done] == [None]


def test_sigterm_moves_leadership_before_the_broker_leaves(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("handover", partitions=1, replication_factor=3)
    leader = cluster.leader("handover")
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), "handover", [b"before"]))
    b = cluster.brokers[leader]
    since = b.log_offset()
    assert b.stop() == 0
    line = b.wait_for_log(rf"controlled shutdown of broker {leader}: .*handover-0: (\d+)", since=since, timeout=5)
    successor = int(line.rsplit("handover-0: ", 1)[1].split(")")[0])
    assert successor != leader
    assert cluster.leader("handover") == successor  # already in place: no wait for the session to expire
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), "handover", [b"after"]))
    assert [v for _, v in read_partition(cluster.bootstrap, "handover")] == [b"before", b"after"]


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(start_cluster):
    cluster = start_cluster(3)
    cluster.create_topic("prefer", partitions=1, replication_factor=3)
    preferred = cluster.partition("prefer").replicas[0]
    assert cluster.leader("prefer") == preferred
    cluster.brokers[preferred].stop()  # a controlled shutdown hands leadership to another replica
    other = cluster.wait_for_leader("prefer", not_in=(preferred,))
    admin = cluster.admin()
    tp = TopicPartition("prefer", 0)
    # the preferred replica is away: PREFERRED_LEADER_NOT_AVAILABLE
    result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
    assert result[tp].code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE, result
    cluster.brokers[preferred].start()
    cluster.wait_for_isr("prefer", 0, {1, 2, 3}, timeout=60)
    assert cluster.leader("prefer") == other  # back in the ISR, but not leader by itself
    admin = cluster.admin()
    result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
    assert result[tp] is None, result
    cluster.wait_until(lambda: cluster.leader("prefer") == preferred, 10, "the preferred replica leading")
    # and again: nothing to do
    admin = cluster.admin()
    result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
    assert result[tp].code() == KafkaError.ELECTION_NOT_NEEDED, result


def test_auto_leader_rebalance_returns_leadership_to_the_preferred_replica(start_cluster):
    cluster = start_cluster(3, leader_imbalance_check_interval_seconds=1)
    cluster.create_topic("rebalanced", partitions=1, replication_factor=3)
    preferred = cluster.partition("rebalanced").replicas[0]
    cluster.brokers[preferred].stop()
    cluster.wait_for_leader("rebalanced", not_in=(preferred,))
    cluster.brokers[preferred].start()
    cluster.wait_until(lambda: cluster.leader("rebalanced") == preferred, 60, "the preferred replica leading again")


def test_producer_ids_are_unique_across_brokers(start_cluster):
    """Each broker hands out producer ids from one cluster-wide counter: idempotent producers that got
    theirs from different brokers never share one (a shared id would make the leader drop one's records
    as the other's duplicates, or refuse them as out of order)."""
    cluster = start_cluster(3)
    cluster.create_topic("ids", partitions=1, replication_factor=3)
    sent = []
    for round_ in range(2):
        for node, b in cluster.brokers.items():
            values = [f"{round_}-{node}-{i}".encode() for i in range(10)]
            p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                          "message.timeout.ms": 20000})
            results = produce(p, "ids", values)
            assert [e for e, _, _ in results] == [None] * 10, results
            sent += values
    assert sorted(v for _, v in read_partition(cluster.bootstrap, "ids")) == sorted(sent)


def test_deleted_records_stay_deleted_on_the_next_leader(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("trimmed", partitions=1, replication_factor=3)
    p = producer(cluster, acks="all")
    assert all(e is None for e, _, _ in produce(p, "trimmed", [b"%d" % i for i in range(10)]))
    admin = cluster.admin()  # kept alive until the result is in
    (future,) = admin.delete_records([TopicPartition("trimmed", 0, 6)]).values()
    assert future.result(30).low_watermark == 6
    # acknowledged with acks=all: both followers fetched past the delete, so they heard the new start
    assert all(e is None for e, _, _ in produce(p, "trimmed", [b"10"]))
    leader = cluster.leader("trimmed")
    assert cluster.brokers[leader].stop() == 0  # controlled shutdown: a follower takes over at once
    successor = cluster.wait_for_leader("trimmed", not_in=(leader,))
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "trimmed-check"})
    marks = []

    def all_acknowledged() -> bool:
        marks.append(consumer.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=10))
        return marks[-1][1] == 11

    try:
        # the new leader's high watermark reaches 11 once the other follower fetches from it
        cluster.wait_until(all_acknowledged, 30, "the acknowledged records on the new leader")
    finally:
        consumer.close()
    assert marks[-1] == (6, 11), f"broker {successor} answered {marks[-1]}"
    assert [v for _, v in read_partition(cluster.bootstrap, "trimmed")] == [b"6", b"7", b"8", b"9", b"10"]
