"""A three-broker cluster (etcd + three processes): metadata, replica assignment, replication.

Stock clients only: confluent-kafka's admin and producer/consumer, and raw
CreateTopics frames for explicit replica assignments.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(240)


def consume_all(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m)
    finally:
        consumer.close()
    return got


def test_metadata_shows_every_broker_replicas_isr_and_controller(start_cluster):
    cluster = start_cluster(3)
    cluster.create_topic("spread", partitions=3, replication_factor=3)
    md = cluster.metadata()
    assert sorted(md.brokers) == [1, 2, 3]
    assert md.controller_id in (1, 2, 3)
    partitions = md.topics["spread"].partitions
    assert sorted(len(p.replicas) for p in partitions.values()) == [3, 3, 3]
    assert all(sorted(p.isrs) == [1, 2, 3] for p in partitions.values())
    # leaders spread over the brokers: each leads one of the three partitions
    assert sorted(p.leader for p in partitions.values()) == [1, 2, 3]
    assert all(p.leader == p.replicas[0] for p in partitions.values())
    # every broker answers the same
    for b in cluster.brokers.values():
        other = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("spread", timeout=10)
        assert {i: (p.leader, p.replicas) for i, p in other.topics["spread"].partitions.items()} == \
            {i: (p.leader, p.replicas) for i, p in partitions.items()}
    admin = cluster.admin()
    described = admin.describe_cluster().result(10)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.controller.id == md.controller_id


def test_topics_with_more_partitions_than_one_etcd_transaction_holds(start_cluster):
    """etcd refuses a transaction of more than 128 operations: creating 300 partitions, and growing to
    450, takes several; every partition has its leader and full ISR on every broker."""
    cluster = start_cluster(3)
    cluster.create_topic("wide", partitions=300, replication_factor=3)
    admin = cluster.admin()
    admin.create_partitions([NewPartitions("wide", 450)])["wide"].result(30)
    cluster.wait_until(lambda: cluster.full_isr("wide", 450, 3), 30, "wide grown and fully replicated")
    for b in cluster.brokers.values():
        partitions = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("wide", timeout=10).topics["wide"].partitions
        assert sorted(partitions) == list(range(450))
        assert all(p.leader in (1, 2, 3) and len(p.replicas) == 3 for p in partitions.values())


def test_replication_factor_above_the_live_brokers_is_refused(start_cluster):
    cluster = start_cluster(3)
    admin = cluster.admin()
    futures = admin.create_topics([NewTopic("too-many", 1, 4)])
    with pytest.raises(KafkaException) as info:
        futures["too-many"].result(30)
    assert info.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_explicit_replica_assignment(start_cluster):
    cluster = start_cluster(3)
    b = next(iter(cluster.brokers.values()))
    with WireClient(b.port) as client:
        response = client.request("CreateTopics", 5, {
            "topics": [{"name": "placed", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [3, 1]},
                                        {"partition_index": 1, "broker_ids": [2, 3]}], "configs": []},
                       {"name": "unknown-broker", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [1, 7]}], "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
    results = {t["name"]: t for t in response["topics"]}
    assert results["placed"]["error_code"] == 0
    assert (results["placed"]["num_partitions"], results["placed"]["replication_factor"]) == (2, 2)
    assert results["unknown-broker"]["error_code"] == 39  # INVALID_REPLICA_ASSIGNMENT
    cluster.wait_until(lambda: cluster.full_isr("placed", 2, 2), 30, "placed fully replicated")
    assert (cluster.partition("placed", 0).replicas, cluster.partition("placed", 0).leader) == ([3, 1], 3)
    assert (cluster.partition("placed", 1).replicas, cluster.partition("placed", 1).leader) == ([2, 3], 2)


def test_acks_all_records_are_on_every_replica_byte_for_byte(start_cluster):
    cluster = start_cluster(3)
    cluster.create_topic("copied", partitions=2, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    acked = []
    for i in range(500):
        producer.produce("copied", f"value-{i}".encode(), key=str(i).encode(),
                         on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset())))
    assert producer.flush(60) == 0
    assert [e for e, _, _ in acked if e is not None] == []
    got = consume_all(cluster.bootstrap, "copied", 500)
    assert sorted(m.value() for m in got) == sorted(f"value-{i}".encode() for i in range(500))
    for p in range(2):
        ends = {node: None for node in cluster.brokers}
        cluster.wait_until(lambda: len({cluster.log_bytes(n, "copied", p) for n in ends}) == 1, 30,
                           f"replicas of copied-{p} identical")
        assert len(cluster.log_bytes(1, "copied", p)) > 0


def test_auto_created_topic_gets_the_default_replication_factor(start_cluster):
    cluster = start_cluster(3, default_replication_factor=2, num_partitions=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce("auto-made", b"x")
    assert producer.flush(60) == 0
    cluster.wait_until(lambda: cluster.full_isr("auto-made", 2, 2), 30, "auto-made replicated twice")


def test_delete_topics_on_every_broker_and_restarts_keep_ids_and_assignments(start_cluster):
    cluster = start_cluster(3)
    cluster.create_topic("kept", partitions=2, replication_factor=3)
    cluster.create_topic("dropped", partitions=1, replication_factor=3)
    before = cluster.metadata("kept").topics["kept"]
    admin = cluster.admin()
    kept_id = str(admin.describe_topics(TopicCollection(["kept"]))["kept"].result(10).topic_id)
    admin.delete_topics(["dropped"])["dropped"].result(30)
    cluster.wait_until(lambda: all(not b.partition_dir("dropped", 0).exists() for b in cluster.brokers.values()),
                       30, "dropped's logs gone on every broker")
    assert "dropped" not in cluster.metadata().topics
    for b in cluster.brokers.values():  # every broker restarted: the cluster's metadata is in etcd
        b.stop()
        b.start()
    cluster.wait_for_brokers(3)
    cluster.wait_until(lambda: cluster.full_isr("kept", 2, 3), 30, "kept fully replicated again")
    after = cluster.metadata("kept").topics["kept"]
    assert {i: p.replicas for i, p in after.partitions.items()} == {i: p.replicas for i, p in before.partitions.items()}
    admin = cluster.admin()
    assert str(admin.describe_topics(TopicCollection(["kept"]))["kept"].result(10).topic_id) == kept_id
    assert "dropped" not in cluster.metadata().topics


def test_reassignment_moves_a_partition_onto_a_new_broker(start_cluster):
    cluster = start_cluster(4)
    b = cluster.brokers[1]
    with WireClient(b.port) as client:
        created = client.request("CreateTopics", 5, {
            "topics": [{"name": "moved", "num_partitions": -1, "replication_factor": -1,
                        "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]}], "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
        assert created["topics"][0]["error_code"] == 0
    cluster.wait_until(lambda: cluster.full_isr("moved", 1, 3), 30, "moved fully replicated")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(200):
        producer.produce("moved", f"before-{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    with WireClient(b.port) as client:
        moved = client.request("AlterPartitionReassignments", 0, {"timeout_ms": 30000, "topics": [
            {"name": "moved", "partitions": [{"partition_index": 0, "replicas": [4, 2, 3]}]}]})
        assert moved["responses"][0]["partitions"][0]["error_code"] == 0, moved
        nothing = client.request("AlterPartitionReassignments", 0, {"timeout_ms": 30000, "topics": [
            {"name": "moved", "partitions": [{"partition_index": 0, "replicas": [1, 9]}]}]})
        assert nothing["responses"][0]["partitions"][0]["error_code"] in (39, 60)  # unknown broker / under way
    # broker 4 catches up, joins the ISR; broker 1 (the leader) leaves and leadership moves
    cluster.wait_until(lambda: (p := cluster.partition("moved")) is not None and p.replicas == [4, 2, 3]
                       and sorted(p.isrs) == [2, 3, 4], 60, "the reassignment done")
    assert cluster.leader("moved") in (2, 3, 4)
    with WireClient(cluster.brokers[2].port) as client:
        listed = client.request("ListPartitionReassignments", 0, {"timeout_ms": 30000, "topics": None})
        assert listed["topics"] == []
    for i in range(100):
        producer.produce("moved", f"after-{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    got = consume_all(cluster.bootstrap, "moved", 300)
    assert [m.value() for m in got] == [f"before-{i}".encode() for i in range(200)] + \
        [f"after-{i}".encode() for i in range(100)]
    cluster.wait_until(lambda: len({cluster.log_bytes(n, "moved") for n in (2, 3, 4)}) == 1, 30,
                       "the new replica byte-identical")
    assert cluster.log_bytes(1, "moved") == b"", "the replica moved away keeps its records"


def test_kept_metadata_answers_follow_topic_creates_deletes_and_leader_changes(start_cluster):
    """Each broker keeps encoded Metadata answers (all topics, a topic set): asked again after a topic is
    created or deleted, or a partition changes leader and ISR, every broker answers what is true now."""
    cluster = start_cluster(3)
    cluster.create_topic("kept-a", partitions=2, replication_factor=3)
    admins = {node: AdminClient({"bootstrap.servers": b.bootstrap}) for node, b in cluster.brokers.items()}

    def answers(node: int) -> tuple[dict, dict]:
        everything = admins[node].list_topics(timeout=10).topics
        one = admins[node].list_topics("kept-a", timeout=10).topics["kept-a"]
        return ({name: {i: (p.leader, sorted(p.isrs)) for i, p in t.partitions.items()}
                 for name, t in everything.items() if name.startswith("kept-")},
                {i: (p.leader, sorted(p.isrs)) for i, p in one.partitions.items()})

    for node in admins:  # asked twice: the second answer is a kept one
        assert answers(node) == answers(node)
        assert set(answers(node)[0]) == {"kept-a"}
    cluster.create_topic("kept-b", partitions=3, replication_factor=3)
    for node in admins:
        cluster.wait_until(lambda n=node: set(answers(n)[0]) == {"kept-a", "kept-b"}, 30, f"broker {node} "
                           "naming the new topic")
        assert len(answers(node)[0]["kept-b"]) == 3
    admin = cluster.admin()
    assert admin.delete_topics(["kept-b"])["kept-b"].result(30) is None
    for node in admins:
        cluster.wait_until(lambda n=node: set(answers(n)[0]) == {"kept-a"}, 30, f"broker {node} forgetting kept-b")
    leader = cluster.leader("kept-a", 0)
    cluster.brokers[leader].stop()  # a controlled shutdown: its partitions get other leaders, it leaves the ISRs
    del admins[leader]
    for node in admins:
        def moved(n=node) -> bool:
            everything, one = answers(n)
            return all(lead not in (-1, leader) and leader not in isr for lead, isr in one.values()) and \
                everything["kept-a"] == one
        cluster.wait_until(moved, 30, f"broker {node} naming kept-a's new leaders")
