"""Transactions across a three-broker cluster: markers travel to other brokers' partitions, follow a
partition whose leader moved, and carry the coordinator epoch that fences an older coordinator.

Real etcd, three broker processes (helpers.cluster), and raw requests where a client library cannot
say what is tested.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, TopicPartition

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.txn_wire import begin, end_txn, log_end, lso
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(180)

NONE, INVALID_REQUEST, TRANSACTION_COORDINATOR_FENCED = 0, 42, 52
TRANSACTION_KEY = 1  # FindCoordinator's key type of a transactional id
DEADLINE_S = 40


def find_coordinator(cluster, transactional_id: str) -> int:
    """The node the cluster names as the id's transaction coordinator."""
    def ask() -> int:
        broker = next(b for b in cluster.brokers.values() if b.alive())
        with WireClient(broker.port) as c:
            (found,) = c.request("FindCoordinator", 4, {"key_type": TRANSACTION_KEY,
                                                        "coordinator_keys": [transactional_id]})["coordinators"]
        return found["node_id"] if found["error_code"] == NONE else -1

    cluster.wait_until(lambda: ask() >= 0, 30, f"a coordinator for {transactional_id}")
    return ask()


def create_placed(cluster, name: str, replicas: list[list[int]]) -> None:
    """A topic whose partition i has replicas[i] (the first leads)."""
    broker = next(b for b in cluster.brokers.values() if b.alive())
    with WireClient(broker.port) as c:
        r = c.request("CreateTopics", 5, {"timeout_ms": 30000, "validate_only": False, "topics": [{
            "name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
            "assignments": [{"partition_index": i, "broker_ids": ids} for i, ids in enumerate(replicas)]}]})
    assert r["topics"][0]["error_code"] == NONE, r
    cluster.wait_until(lambda: cluster.full_isr(name, len(replicas), len(replicas[0])), 30, f"{name} replicated")
    assert [cluster.leader(name, i) for i in range(len(replicas))] == [ids[0] for ids in replicas]


def test_markers_reach_partitions_other_brokers_lead(start_cluster):
    """A transaction over partitions only other brokers lead completes: its markers crossed the network."""
    cluster = start_cluster(3)
    coordinator = find_coordinator(cluster, "wire-app")
    others = [n for n in (1, 2, 3) if n != coordinator]
    create_placed(cluster, "remote", [[others[0], others[1], coordinator], [others[1], others[0], coordinator]])
    with WireClient(cluster.brokers[coordinator].port) as c:
        txn = begin(c, "wire-app", "remote", [0, 1])
        assert end_txn(c, txn, committed=True) == NONE

        def state() -> str:
            return c.request("DescribeTransactions", 0, {"transactional_ids": ["wire-app"]})[
                "transaction_states"][0]["transaction_state"]

        cluster.wait_until(lambda: state() == "CompleteCommit", DEADLINE_S, "the commit markers written")
    for index, leader in enumerate(others):
        with WireClient(cluster.brokers[leader].port) as c:
            assert log_end(c, "remote", index) == 1, "the commit marker"
            assert lso(c, "remote", index) == 1


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(start_cluster):
    """Each partition keeps the coordinator epoch of a producer's last marker, also on a new leader (from
    the replicated markers) and after a restart (from the log): a marker from an older coordinator is
    TRANSACTION_COORDINATOR_FENCED; one from an epoch no coordinator has yet is refused."""
    cluster = start_cluster(3)
    create_placed(cluster, "fenced", [[1, 2, 3]])
    with WireClient(cluster.brokers[1].port) as c:
        r = c.request("InitProducerId", 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                            "producer_id": -1, "producer_epoch": -1})
        assert r["error_code"] == NONE
    pid = r["producer_id"]
    # a coordinator epoch is its __transaction_state partition's leader epoch: move every leadership
    # of broker 3 (a controlled shutdown) so some partition of it is at epoch 1
    find_coordinator(cluster, "any")  # creates __transaction_state
    cluster.wait_until(lambda: cluster.full_isr("__transaction_state", 3, 3), 30, "__transaction_state replicated")
    cluster.brokers[3].stop()
    cluster.brokers[3].start()
    cluster.wait_for_isr("__transaction_state", 0, {1, 2, 3})

    def marker(node: int, coordinator_epoch: int) -> int:
        with WireClient(cluster.brokers[node].port) as c:
            r = c.request("WriteTxnMarkers", 1, {"markers": [{
                "producer_id": pid, "producer_epoch": 0, "transaction_result": False,
                "coordinator_epoch": coordinator_epoch, "topics": [{"name": "fenced", "partition_indexes": [0]}]}]})
        return r["markers"][0]["topics"][0]["partitions"][0]["error_code"]

    assert marker(1, 1000) == INVALID_REQUEST, "above every coordinator's epoch"
    assert marker(1, 1) == NONE
    assert marker(1, 0) == TRANSACTION_COORDINATOR_FENCED

    cluster.wait_for_isr("fenced", 0, {1, 2, 3})
    cluster.brokers[1].kill()
    new_leader = cluster.wait_for_leader("fenced", not_in=(1,))
    assert marker(new_leader, 0) == TRANSACTION_COORDINATOR_FENCED, "the new leader learned it from the marker"
    cluster.brokers[1].start()  # recovers its log, producer state included
    cluster.wait_for_isr("fenced", 0, {1, 2, 3}, timeout=60)
    tp = TopicPartition("fenced", 0)
    admin = cluster.admin()  # kept alive until the result is in
    assert admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)[tp] is None
    cluster.wait_until(lambda: cluster.leader("fenced") == 1, 30, "broker 1 leading fenced-0 again")
    assert marker(1, 0) == TRANSACTION_COORDINATOR_FENCED, "a restart rebuilt it from the log"
