"""Stock transactional clients against a three-broker cluster: a transaction over partitions three
different brokers lead, and a partition leader lost between EndTxn and its marker."""

from __future__ import annotations

import os
import signal

import pytest

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.cluster_txn import consume, create_placed, find_coordinator, transaction, txn_producer

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
