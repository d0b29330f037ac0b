"""Stock transactional clients against a three-broker cluster: a transaction over partitions three
different brokers lead, a partition leader lost between EndTxn and its marker, and Java kafka-clients
across a kill -9 of the transaction coordinator's broker."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.cluster_txn import consume, create_placed, find_coordinator, transaction, txn_producer
from helpers.java_clients import JavaClients, every

pytestmark = pytest.mark.timeout(180)


def test_a_transaction_over_three_leaders_commits_with_markers_sent_over_the_network(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2)
    coordinator = find_coordinator(cluster, "spread-app")
    others = [n for n in (1, 2, 3) if n != coordinator]
    create_placed(cluster, "spread", [[1, 2, 3], [2, 3, 1], [3, 1, 2]])  # each broker leads one partition
    create_placed(cluster, "elsewhere", [[others[0], others[1], coordinator], [others[1], others[0], coordinator]])
    spread = [("spread", i) for i in range(3)]
    elsewhere = [("elsewhere", i) for i in range(2)]

    p = txn_producer(cluster, "spread-app")
    committed = transaction(p, spread, "first", 20)
    transaction(p, spread + elsewhere, "aborted", 10, commit=False)
    committed += transaction(p, elsewhere, "last", 20)  # the coordinator's broker leads none of these

    # only markers make records visible to read_committed, and those of the other brokers' partitions
    # came from the coordinator's broker over the network
    got = consume(cluster, spread + elsewhere, len(committed), "read_committed")
    assert sorted(got) == sorted(committed), "every committed record once, no aborted one"


@pytest.mark.parametrize("fault", ["SIGSTOP", "SIGKILL"])
def test_markers_follow_a_partition_whose_leader_moved(start_cluster, fault):
    """The leader of one of the transaction's partitions stops (or dies) before EndTxn: its marker fails
    (timeout, refused connection) until the controller elects a new leader, which then gets it."""
    cluster = start_cluster(3, min_insync_replicas=2, request_timeout_ms=3000)
    coordinator = find_coordinator(cluster, "moving-app")
    victim, other = [n for n in (1, 2, 3) if n != coordinator]
    create_placed(cluster, "moving", [[victim, other, coordinator], [other, coordinator, victim]])
    tps = [("moving", 0), ("moving", 1)]
    p = txn_producer(cluster, "moving-app")

    def lose_the_leader():
        assert consume(cluster, tps, 1, "read_committed", timeout=1, settle=0) == [], "nothing visible yet"
        if fault == "SIGSTOP":
            os.kill(cluster.brokers[victim].pid, signal.SIGSTOP)
        else:
            cluster.brokers[victim].kill()

    try:
        committed = transaction(p, tps, "first", 20, before_end=lose_the_leader)
        assert sorted(consume(cluster, tps, len(committed), "read_committed")) == sorted(committed)
        assert cluster.leader("moving", 0) not in (victim, -1), "the marker went to a new leader"
    finally:
        if fault == "SIGSTOP":
            os.kill(cluster.brokers[victim].pid, signal.SIGCONT)
    if fault == "SIGKILL":
        cluster.brokers[victim].start()
    cluster.wait_for_isr("moving", 0, {1, 2, 3}, timeout=60)  # the old leader truncated what it had alone

    transaction(p, tps, "aborted", 10, commit=False)
    committed += transaction(p, tps, "last", 10)
    assert sorted(consume(cluster, tps, len(committed), "read_committed")) == sorted(committed)
    cluster.wait_until(lambda: len({cluster.log_bytes(n, "moving", 0) for n in (1, 2, 3)}) == 1, 30,
                       "identical replicas of moving-0")


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClients:
    return JavaClients.build(tmp_path_factory.mktemp("java"))  # unavailable: the test fails, it does not skip


def test_java_transactions_survive_a_kill_of_the_coordinators_broker(start_cluster, java, tmp_path):
    """kafka-clients 3.9: the second of three transactions has its records flushed when the broker
    coordinating it is killed; its commit goes to the next coordinator, and a read_committed consumer
    reads every record of the three exactly once."""
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("java-txn", partitions=3, replication_factor=3)
    hold, go = tmp_path / "hold", tmp_path / "go"
    result: dict = {}
    run = threading.Thread(target=lambda: result.update(lines=java.run(
        cluster.bootstrap, "transactionsHeld", "java-txn", 3, 50, "java-held", hold, go, timeout=150)))
    run.start()
    try:
        cluster.wait_until(hold.exists, 60, "the second transaction's records flushed")
        victim = find_coordinator(cluster, "java-held")
        cluster.brokers[victim].kill()
    finally:
        go.touch()
        run.join(170)
    assert "lines" in result, "the Java run failed (its error is in the output above)"
    lines = result["lines"]
    assert [line["transaction"] for line in every(lines, "committed")] == [0, 1, 2]
    values = sorted(bytes.fromhex(r["value"]).decode() for r in every(lines, "record"))
    assert values == sorted(f"t{t}-p{p}-{i}" for t in range(3) for p in range(3) for i in range(50))
    assert find_coordinator(cluster, "java-held") != victim
