"""Replicas' lives in a three-broker cluster: joining the ISR, falling behind the leader's log start,
being moved away, restarts. Real etcd, three broker processes, confluent-kafka clients.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from test_cluster_failover import produce, producer, read_partition

pytestmark = pytest.mark.timeout(180)


def test_a_follower_joining_the_isr_counts_for_acks_all_from_the_moment_it_is_proposed(start_cluster, monkeypatch):
    """Kafka's maximal ISR: while the leader's write adding a follower to the ISR is on its way (held here
    for seconds by a fault hook), the follower already counts for the high watermark. Otherwise the leader
    acknowledges records the follower lacks, the write lands, and a clean election of that follower loses
    them."""
    monkeypatch.setenv("MOLDAU_FAULT_DELAY_ISR_EXPANSION_MS", "8000")
    cluster = start_cluster(3, min_insync_replicas=2, replica_fetch_wait_max_ms=100)
    cluster.create_topic("joining", partitions=1, replication_factor=3)
    leader = cluster.leader("joining")
    joiner, other = [n for n in cluster.brokers if n != leader]
    acked = []

    def send(value: bytes, **config) -> None:
        (result,) = produce(producer(cluster, acks="all", **config), "joining", [value])
        if result[0] is None:
            acked.append(value)

    send(b"first")
    cluster.brokers[joiner].kill()
    cluster.wait_for_isr("joining", 0, {leader, other})
    send(b"while-away")
    assert acked == [b"first", b"while-away"]
    since = cluster.brokers[leader].log_offset()
    cluster.brokers[joiner].start()  # catches up; the leader proposes it for the ISR and holds the write
    cluster.brokers[leader].wait_for_log(r"joining-0: fault injection .* holding the ISR change", since=since,
                                         timeout=30)
    os.kill(cluster.brokers[joiner].pid, signal.SIGSTOP)
    try:
        send(b"during-expansion", message_timeout_ms=3000, request_timeout_ms=3000, retries=0)
        cluster.brokers[leader].wait_for_log(rf"joining-0: ISR \[.*\] -> \[.*{joiner}.*\]", since=since, timeout=30)
        # the joiner is in the ISR etcd holds: a clean election may make it leader, so it must have
        # every acknowledged record
        on_joiner = cluster.log_bytes(joiner, "joining")
        assert [v for v in acked if v not in on_joiner] == []
    finally:
        os.kill(cluster.brokers[joiner].pid, signal.SIGCONT)
    assert b"during-expansion" not in acked


def test_a_follower_behind_the_leaders_log_start_starts_over_there(start_cluster):
    """DeleteRecords while a follower is down: its log ends below the leader's log start, the leader
    answers OFFSET_OUT_OF_RANGE, and the follower empties its log and fetches from the leader's log start
    (Kafka's truncateFullyAndStartAt) instead of asking again forever."""
    cluster = start_cluster(3, replica_fetch_wait_max_ms=100)
    cluster.create_topic("trimmed", partitions=1, replication_factor=3)
    leader = cluster.leader("trimmed")
    behind, other = [n for n in cluster.brokers if n != leader]
    p = producer(cluster, acks="all")
    assert all(e is None for e, _, _ in produce(p, "trimmed", [b"%d" % i for i in range(5)]))
    cluster.brokers[behind].kill()
    cluster.wait_for_isr("trimmed", 0, {leader, other})
    assert all(e is None for e, _, _ in produce(p, "trimmed", [b"%d" % i for i in range(5, 10)]))
    admin = cluster.admin()  # kept alive until the result is in
    (future,) = admin.delete_records([TopicPartition("trimmed", 0, 8)]).values()
    assert future.result(30).low_watermark == 8
    since = cluster.brokers[behind].log_offset()
    cluster.brokers[behind].start()
    cluster.wait_for_isr("trimmed", 0, {1, 2, 3}, timeout=30)
    cluster.brokers[behind].wait_for_log(r"trimmed-0: fetch offset 5 out of the leader's range \(its log start 8\)",
                                         since=since)
    assert all(e is None for e, _, _ in produce(p, "trimmed", [b"10"]))
    # the returned follower alone: it serves what the leader had from its log start on
    for n in (leader, other):
        assert cluster.brokers[n].stop() == 0
    assert cluster.wait_for_leader("trimmed") == behind
    assert [v for _, v in read_partition(cluster.bootstrap, "trimmed")] == [b"8", b"9", b"10"]


def test_high_watermarks_are_checkpointed_for_a_whole_cluster_restart(start_cluster):
    """replication-offset-checkpoint: after every broker crashed, the replicas start from the high
    watermark they had, not from their log start (consumers would briefly see less than before)."""
    cluster = start_cluster(3, replica_high_watermark_checkpoint_interval_ms=200, replica_fetch_wait_max_ms=100)
    cluster.create_topic("marks", partitions=1, replication_factor=3)
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), "marks", [b"%d" % i for i in range(10)]))
    # every replica's checkpoint holds the high watermark (the followers learn it from their next fetch)
    files = [b.data_dir / "replication-offset-checkpoint" for b in cluster.brokers.values()]
    cluster.wait_until(lambda: all(f.exists() and "marks 0 10" in f.read_text() for f in files), 10,
                       "high watermarks checkpointed")
    for b in cluster.brokers.values():
        b.kill()
    for b in cluster.brokers.values():
        b.start()
    leader = cluster.wait_for_leader("marks")
    consumer = Consumer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "group.id": "marks"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("marks", 0), timeout=10) == (0, 10)
    finally:
        consumer.close()


def test_a_restart_keeps_the_internal_topics_the_cluster_created(start_cluster):
    """The coordinators' topics are created in etcd on first use; no broker makes a local one of its own
    (with its own topic id) that the cluster's later replaces or a restart deletes."""
    cluster = start_cluster(3)
    cluster.create_topic("work", partitions=1, replication_factor=3)
    # a transactional producer's start creates __transaction_state (transactions across brokers are issue 13's)
    Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "restart-txn"}).init_transactions(30)
    assert all(e is None for e, _, _ in produce(producer(cluster, acks="all"), "work", [b"for-the-group"]))
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "restart-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["work"])
        m = None
        for _ in range(60):
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                break
        assert m is not None and m.value() == b"for-the-group"
        consumer.commit(m, asynchronous=False)
    finally:
        consumer.close()
    restarted = cluster.brokers[1]
    restarted.stop()
    restarted.start()
    cluster.wait_for_brokers(3)
    for node, b in cluster.brokers.items():
        text = b.log_text()
        assert "replacing it" not in text and "was deleted from the cluster" not in text, f"broker {node}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "restart-group"})
    try:  # the group's coordinator may have moved with the restart: the commit moved with it
        (committed,) = consumer.committed([TopicPartition("work", 0)], timeout=30)
        assert committed.offset == 1
    finally:
        consumer.close()



def test_a_write_from_a_past_leadership_is_not_acknowledged_when_its_broker_leads_again(start_cluster, monkeypatch):
    """An acks=all write belongs to the leader epoch it was appended in. Here its wait starts late (a fault
    hook: a busy leader); meanwhile the leader is deposed, truncates the write, and leads again at a later
    epoch over other records at that offset: the answer is NOT_LEADER_OR_FOLLOWER (the producer retries), never
    an acknowledgement of that offset."""
    monkeypatch.setenv("MOLDAU_FAULT_DELAY_REPLICATION_WAIT_MS", "30000")
    cluster = start_cluster(3, min_insync_replicas=2, replica_fetch_wait_max_ms=100)
    cluster.create_topic("regained", partitions=1, replication_factor=3)
    leader = cluster.leader("regained")
    followers = [n for n in cluster.brokers if n != leader]
    results = []
    writer = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "all",
                       "request.timeout.ms": 90000, "message.timeout.ms": 110000})
    # the followers paused (shorter than the session and lag timeouts): nobody copies the write
    for n in followers:
        os.kill(cluster.brokers[n].pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        since = cluster.brokers[leader].log_offset()
        writer.produce("regained", b"appended-then-cut", partition=0,
                       on_delivery=lambda err, m: results.append((err, m.offset())))
        writer.poll(0)
        cluster.brokers[leader].wait_for_log(r"regained-0: fault injection .* starts in", since=since)
    finally:
        for n in followers:
            os.kill(cluster.brokers[n].pid, signal.SIGCONT)
    # the leader paused past its session: a follower takes over; on waking it truncates the write
    os.kill(cluster.brokers[leader].pid, signal.SIGSTOP)
    try:
        cluster.wait_for_leader("regained", not_in=(leader,))
    finally:
        os.kill(cluster.brokers[leader].pid, signal.SIGCONT)
    others = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1})  # (acks=all would wait 30 s too)
    assert all(e is None for e, _, _ in produce(others, "regained", [b"refill-1", b"refill-2"]))
    cluster.wait_for_isr("regained", 0, {1, 2, 3})
    admin = cluster.admin()
    tp = TopicPartition("regained", 0)

    def elected() -> bool:
        error = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)[tp]
        assert error is None or error.code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE, error
        return error is None

    # it leads again (back in the ISR, it may count as live at the controller a moment later: a new etcd session)
    cluster.wait_until(elected, 30, "the preferred leader to be elected")
    assert cluster.leader("regained") == leader
    assert writer.flush(120) == 0
    # the producer retries after NOT_LEADER_OR_FOLLOWER: acknowledged, if at all, where the record now is
    stored = dict(read_partition(cluster.bootstrap, "regained"))
    ((error, offset),) = results
    assert error is not None or stored.get(offset) == b"appended-then-cut", \
        f"acknowledged at offset {offset}, which holds {stored.get(offset)!r}"
    assert [v for v in stored.values() if v.startswith(b"refill")] == [b"refill-1", b"refill-2"]
