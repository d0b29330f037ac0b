"""Group and transaction coordinators move with the leadership of their internal topics' partitions.

Three brokers and an etcd (helpers.cluster, sessions time out after 4 s);
the broker that coordinates a group or a transactional id -- the leader of
its partition of __consumer_offsets / __transaction_state -- is killed -9,
and the next leader of that partition loads it and takes over.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from broker.coordinator.internal_topics import partition_for
from helpers.cluster import CLUSTER_DEFAULTS, start_cluster  # noqa: F401 (fixture)
from helpers.reliability import WorkloadProcess, assert_verified, group_caught_up, wait_for
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(180)

OFFSETS_PARTITIONS = CLUSTER_DEFAULTS["offsets.topic.num.partitions"]
COORDINATOR_LOAD_IN_PROGRESS, UNSTABLE_OFFSET_COMMIT = 14, 88


def coordinator(cluster, internal_topic: str, key: str) -> int:
    """The broker leading the key's partition of the internal topic, i.e. its coordinator."""
    partitions = CLUSTER_DEFAULTS[{"__consumer_offsets": "offsets.topic.num.partitions",
                                   "__transaction_state": "transaction.state.log.num.partitions"}[internal_topic]]
    return cluster.leader(internal_topic, partition_for(key, partitions))


class Member(threading.Thread):
    """A group member that processes each record, then commits its offset synchronously; a commit
    that fails for a reason that passes (the coordinator is moving) is sent again."""

    def __init__(self, bootstrap: str, group: str, topic: str, processed: list, instance_id: str | None = None):
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 30000, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range", **({"group.instance.id": instance_id} if instance_id else {}),
        })
        self.topic, self.processed, self.stop = topic, processed, threading.Event()
        self.lost_commits: list[str] = []  # commits refused for good: the group moved on without them
        self.assignments: list[list[int]] = []

    def run(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=lambda c, ps: self.assignments.append(
            sorted(p.partition for p in ps)))
        try:
            while not self.stop.is_set():
                m = self.consumer.poll(0.2)
                if m is None or m.error():
                    continue
                self.processed.append((m.partition(), m.offset(), self.name))
                self._commit(TopicPartition(m.topic(), m.partition(), m.offset() + 1))
        finally:
            self.consumer.close()

    def _commit(self, tp: TopicPartition) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.consumer.commit(offsets=[tp], asynchronous=False)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() in (KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                                    KafkaError.REBALANCE_IN_PROGRESS):
                    self.lost_commits.append(f"{tp.partition}@{tp.offset}: {error}")
                    return
                time.sleep(0.2)  # the coordinator is moving: send it again
        self.lost_commits.append(f"{tp.partition}@{tp.offset}: no answer in 60 s")


def produce(bootstrap: str, topic: str, first: int, count: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(first, first + count):
        p.produce(topic, f"{i:05d}".encode(), partition=i % partitions)
    assert p.flush(60) == 0


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_group_keeps_consuming_through_coordinator_kill(start_cluster, static):
    cluster = start_cluster(3, min_insync_replicas=2)
    topic, group, partitions, batch = "events", "survivors", 2, 300
    cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    produce(cluster.bootstrap, topic, 0, batch, partitions)
    processed: list[tuple[int, int, str]] = []
    members = [Member(cluster.bootstrap, group, topic, processed, f"member-{i}" if static else None) for i in range(2)]
    first = list(members)
    for m in members:
        m.start()
    try:
        cluster.wait_until(lambda: len(processed) >= batch and all(m.assignments for m in members), 60,
                           "both members consuming the first records")
        if static:  # (the first member may have had both partitions until the second joined)
            cluster.wait_until(lambda: all(len(m.assignments[-1]) == 1 for m in members), 30, "a partition each")
        places = [list(m.assignments) for m in members]
        victim = coordinator(cluster, "__consumer_offsets", group)
        before_kill = len(processed)
        cluster.brokers[victim].kill()
        if static:  # a static member restarted after the move: the new coordinator gives it back its place
            cluster.wait_for_leader("__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS), not_in=(victim,))
            members[0].stop.set()
            members[0].join(30)
            members[0] = Member(cluster.bootstrap, group, topic, processed, "member-0")
            members[0].start()
        produce(cluster.bootstrap, topic, batch, batch, partitions)
        cluster.wait_until(lambda: len(processed) >= 2 * batch, 90, "every record processed")
        time.sleep(1)  # a record processed twice would show up now
        successor = coordinator(cluster, "__consumer_offsets", group)
    finally:
        for m in {*first, *members}:
            m.stop.set()
            m.join(30)
    assert successor not in (victim, -1)
    seen = [(p, o) for p, o, _ in processed]
    assert len(seen) == len(set(seen)) == 2 * batch, "a record was processed twice or not at all"
    assert [m.lost_commits for m in {*first, *members}] == [[]] * len({*first, *members})
    after_kill = {name for _, _, name in processed[before_kill:]}
    assert {m.name for m in members} <= after_kill, "a member stopped consuming after the kill"
    if static:  # no rebalance: the other member kept its assignment, the restarted one got its own back
        assert sorted([places[0][-1], places[1][-1]]) == [[0], [1]]
        assert first[1].assignments == places[1], (places, first[1].assignments)
        assert members[0].assignments == places[0][-1:], (places, members[0].assignments)
    # the commits made before and after the kill are all with the new coordinator
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = check.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        check.close()
    assert [tp.offset for tp in committed] == [batch] * partitions


def read_committed(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list[bytes]:
    """The values a read_committed consumer gets from partition 0, once it has ``expected`` of them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        return got
    finally:
        c.close()


def transaction(bootstrap: str, transactional_id: str, topic: str, values: list[bytes]) -> None:
    """One committed transaction of ``values`` by a new producer incarnation of ``transactional_id``."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    deadline = time.monotonic() + 60
    while True:
        try:
            p.commit_transaction(30)
            return
        except KafkaException as exc:  # the answer was lost with the coordinator: ask the next one
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise


def test_transaction_in_prepare_commit_completes_on_the_next_coordinator(start_cluster):
    # broker 1 kills itself -9 right after writing its first transaction marker
    cluster = start_cluster(3, env={1: {"MOLDAU_FAULT_KILL_AFTER_TXN_MARKERS": "1"}}, min_insync_replicas=2)
    Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "probe"}).init_transactions(60)
    txn_partitions = CLUSTER_DEFAULTS["transaction.state.log.num.partitions"]
    cluster.wait_until(lambda: cluster.full_isr("__transaction_state", txn_partitions, 3), 30, "__transaction_state")
    # an id that broker 1 coordinates, and a topic whose partition has the same replicas in the same order, so
    # that broker 1 writes the marker itself and the partition moves to the coordinator's successor
    transactional_id = next(t for t in (f"orders-app-{i}" for i in range(100))
                            if coordinator(cluster, "__transaction_state", t) == 1)
    replicas = cluster.partition("__transaction_state", partition_for(transactional_id, txn_partitions)).replicas
    admin = cluster.admin()
    admin.create_topics([NewTopic("orders", 1, replica_assignment=[list(replicas)])])["orders"].result(30)
    cluster.wait_until(lambda: cluster.full_isr("orders", 1, 3), 30, "orders fully replicated")

    first = [f"first-{i}".encode() for i in range(10)]
    transaction(cluster.bootstrap, transactional_id, "orders", first)  # answered once PrepareCommit is committed
    cluster.wait_until(lambda: not cluster.brokers[1].alive(), 30, "broker 1 to kill itself after its marker")
    assert cluster.brokers[1].proc.returncode == -9
    assert "killing the broker after transaction marker 1" in cluster.brokers[1].log_text()

    assert read_committed(cluster.bootstrap, "orders", len(first)) == first
    successor = coordinator(cluster, "__transaction_state", transactional_id)
    assert successor not in (1, -1)
    # the application's next incarnation: fenced predecessor, new epoch, on it goes
    second = [f"second-{i}".encode() for i in range(5)]
    transaction(cluster.bootstrap, transactional_id, "orders", second)
    assert read_committed(cluster.bootstrap, "orders", len(first) + len(second)) == first + second
    assert "completing <transaction " + transactional_id in cluster.brokers[successor].log_text()


def copies_committed(journal: Path, name: str) -> int:
    """Transactions the copy app ``name`` has journaled as committed."""
    path = journal / f"{name}.jsonl"
    return path.read_text().count('"outcome":"commit"') if path.exists() else 0


def test_exactly_once_copy_survives_the_kill_of_its_coordinators_and_output_leader(start_cluster, tmp_path):
    cluster = start_cluster(3, min_insync_replicas=2)
    journal, group, partitions = tmp_path / "journal", "eos-copier", 3
    for topic in ("eos-in", "eos-out"):
        cluster.create_topic(topic, partitions=partitions, replication_factor=3)
    source = WorkloadProcess("transactional-producer", cluster.bootstrap, journal, "source", topic="eos-in",
                             partitions=partitions, rate=300, txn_size=5)
    copier = WorkloadProcess("copy-app", cluster.bootstrap, journal, "copier", topic="eos-in", output="eos-out",
                             group=group)
    # the broker coordinating its transactional id, then its group, then leading a partition of its output
    victims = (("__transaction_state", lambda: coordinator(cluster, "__transaction_state", "copier")),
               ("__consumer_offsets", lambda: coordinator(cluster, "__consumer_offsets", group)),
               ("eos-out", lambda: cluster.leader("eos-out", 0)))
    with source, copier:
        for role, leader in victims:
            before = copies_committed(journal, "copier")
            wait_for(lambda: copies_committed(journal, "copier") > before + 10, 60, "copies before the kill")
            victim = leader()
            cluster.brokers[victim].kill()
            after_kill = copies_committed(journal, "copier")
            wait_for(lambda: copies_committed(journal, "copier") > after_kill + 10, 60,
                     f"copies committed after the kill of the {role} leader")
            assert leader() not in (victim, -1)
            assert source.alive() and copier.alive(), source.stderr_tail() + copier.stderr_tail()
            cluster.brokers[victim].start()  # back in the ISRs before the next kill: min.insync.replicas holds
            for topic, count in (("eos-in", partitions), ("eos-out", partitions), ("__transaction_state", 3),
                                 ("__consumer_offsets", 3)):
                cluster.wait_until(lambda: cluster.full_isr(topic, count, 3), 60, f"{topic} fully replicated")
        assert source.stop(60) == 0, source.stderr_tail()
        wait_for(lambda: group_caught_up(cluster.bootstrap, group, "eos-in", partitions), 60, "the copy to catch up")
        assert copier.stop(30) == 0, copier.stderr_tail()
    assert_verified(cluster.bootstrap, journal)


def offset_fetch(cluster, node: int, group: str, topic: str) -> tuple[int, int]:
    """(error code, committed offset) of partition 0 at broker ``node``, with require_stable."""
    with WireClient(cluster.brokers[node].port) as c:
        r = c.request("OffsetFetch", 7, {"group_id": group, "require_stable": True,
                                         "topics": [{"name": topic, "partition_indexes": [0]}]})
    if r["error_code"]:
        return r["error_code"], -1
    (p,) = r["topics"][0]["partitions"]
    return p["error_code"], p["committed_offset"]


def test_pending_transactional_offsets_move_with_the_group_coordinator(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("consumed", partitions=1, replication_factor=3)
    group = "pending-offsets"
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    metadata = reader.consumer_group_metadata()
    Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "probe"}).init_transactions(60)
    assert reader.committed([TopicPartition("consumed", 0)], timeout=30)[0].offset < 0  # creates __consumer_offsets
    cluster.wait_until(lambda: cluster.full_isr("__consumer_offsets", OFFSETS_PARTITIONS, 3), 30, "__consumer_offsets")
    victim = coordinator(cluster, "__consumer_offsets", group)
    # a transactional id coordinated elsewhere: only the group's coordinator dies
    transactional_id = next(t for t in (f"offsets-app-{i}" for i in range(100))
                            if coordinator(cluster, "__transaction_state", t) != victim)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id})
    p.init_transactions(60)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("consumed", 0, 42)], metadata, 30)
    assert offset_fetch(cluster, victim, group, "consumed") == (UNSTABLE_OFFSET_COMMIT, -1)

    cluster.brokers[victim].kill()
    successor = cluster.wait_for_leader("__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS),
                                        not_in=(victim,))
    cluster.wait_until(lambda: offset_fetch(cluster, successor, group, "consumed")[0] != COORDINATOR_LOAD_IN_PROGRESS,
                       30, "the new coordinator to load the group")
    assert offset_fetch(cluster, successor, group, "consumed") == (UNSTABLE_OFFSET_COMMIT, -1)
    p.commit_transaction(60)
    cluster.wait_until(lambda: offset_fetch(cluster, successor, group, "consumed") == (0, 42), 30,
                       "the committed offset at the new coordinator")
    reader.close()
