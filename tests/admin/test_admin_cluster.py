"""The admin tools against a 3-broker cluster: topics spread over the brokers as Metadata says, consumer lag equal
to the truth with the group's coordinator, the partitions' leaders and the tool's bootstrap broker possibly all
different brokers, a reset that takes effect, and a broker killed showing up in `cluster describe` and
`topics --describe --under-replicated-partitions`."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.admin_tools import fields, moldau, ok, table
from helpers.cluster import start_cluster  # noqa: F401 (a fixture)
from helpers.kafka import COMMON

pytestmark = pytest.mark.timeout(240)


def describe(bootstrap: str, *args: str) -> list[dict]:
    """`topics --describe`'s lines as fields (the topic lines' and the partition lines' alike)."""
    return [fields(line) for line in ok(moldau("topics", bootstrap, "--describe", *args)).splitlines()]


def test_tools_on_a_three_broker_cluster(start_cluster):
    cluster = start_cluster(3)
    first = cluster.brokers[1].bootstrap  # one broker: the tools find the rest from Metadata
    ok(moldau("topics", first, "--create", "--topic", "spread", "--partitions", "6", "--replication-factor", "3"))
    cluster.wait_until(lambda: cluster.full_isr("spread", 6, 3), 30, "spread fully replicated")

    topic, *partitions = describe(first, "--topic", "spread")
    assert (topic["PartitionCount"], topic["ReplicationFactor"]) == ("6", "3")
    truth = cluster.metadata("spread").topics["spread"].partitions
    assert {int(p["Partition"]): (int(p["Leader"]), sorted(map(int, p["Replicas"].split(","))))
            for p in partitions} == {i: (t.leader, sorted(t.replicas)) for i, t in truth.items()}
    assert len({p["Leader"] for p in partitions}) > 1, "leaders spread over the brokers"

    # lag, with the coordinator found through FindCoordinator and each log end from its partition's leader
    produced = {p: 3 + p for p in range(6)}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **COMMON})
    for p, n in produced.items():
        for i in range(n):
            producer.produce("spread", value=b"%d" % i, partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "spread-app", "enable.auto.commit": False,
                         **COMMON})
    commits = {p: n // 2 for p, n in produced.items()}
    consumer.commit(offsets=[TopicPartition("spread", p, o) for p, o in commits.items()], asynchronous=False)
    consumer.close()
    for node in cluster.brokers:  # any broker as the bootstrap gives the same answer
        rows = table(ok(moldau("consumer-groups", cluster.brokers[node].bootstrap, "--describe", "--group",
                               "spread-app")))
        assert {int(r["PARTITION"]): (int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"]), int(r["LAG"]))
                for r in rows} == {p: (commits[p], n, n - commits[p]) for p, n in produced.items()}

    reset = table(ok(moldau("consumer-groups", first, "--reset-offsets", "--group", "spread-app", "--topic", "spread",
                            "--to-latest", "--execute")))
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in reset} == produced
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "spread-app", **COMMON})
    assert {tp.partition: tp.offset for tp in check.committed(
        [TopicPartition("spread", p) for p in produced], 30)} == produced
    check.close()

    # a transaction, listed by its coordinator whichever broker that is
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "spread-tx", **COMMON})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("spread", value=b"t", partition=0)
    assert txn.flush(30) == 0
    (listed,) = [r for r in table(ok(moldau("transactions", first, "list"))) if r["TransactionalId"] == "spread-tx"]
    (described,) = table(ok(moldau("transactions", first, "describe", "--transactional-id", "spread-tx")))
    assert (listed["Coordinator"], listed["TransactionState"]) == (described["CoordinatorId"], "Ongoing")
    assert described["TopicPartitions"] == "spread-0"
    txn.abort_transaction(30)

    lines = ok(moldau("cluster describe", first)).splitlines()
    assert lines[1] == f"Controller: {cluster.metadata().controller_id}" and lines[2] == "Brokers: 3"
    assert [fields(line)["Broker"] for line in lines[3:6]] == ["1", "2", "3"]
    assert "UnderReplicatedPartitions: 0" in lines

    cluster.brokers[3].kill()
    cluster.wait_until(lambda: all(3 not in p.isrs and p.leader in (1, 2)
                                   for p in cluster.metadata("spread").topics["spread"].partitions.values()),
                       60, "broker 3 out of every ISR of spread")

    def under_replicated_spread() -> list[int]:
        return sorted(int(p["Partition"]) for p in describe(first, "--under-replicated-partitions")
                      if p["Topic"] == "spread")

    # the broker the tools ask applies the ISR changes from its own etcd watch, maybe a moment after the one
    # the metadata above came from
    cluster.wait_until(lambda: under_replicated_spread() == list(range(6)), 30,
                       "the broker the tools ask to see every partition of spread under-replicated")
    under = describe(first, "--under-replicated-partitions")  # partition lines only
    assert {p["Topic"] for p in under} >= {"spread"}
    assert sorted(int(p["Partition"]) for p in under if p["Topic"] == "spread") == list(range(6))
    assert all("3" not in p["Isr"].split(",") and "3" in p["Replicas"].split(",") for p in under)
    assert ok(moldau("topics", first, "--describe", "--topic", "spread", "--unavailable-partitions")) == ""
    counts = dict(line.split(": ", 1) for line in ok(moldau("cluster describe", first)).splitlines()
                  if not line.startswith("\t"))
    assert counts["Brokers"] == "2" and int(counts["UnderReplicatedPartitions"]) >= 6
    assert counts["OfflinePartitions"] == "0"
