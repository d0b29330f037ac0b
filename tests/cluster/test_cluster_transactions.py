"""Exactly-once across a three-broker cluster: transaction markers travel to other brokers' partitions,
follow a partition whose leader moved, and carry the coordinator epoch that fences an older coordinator;
idempotent retries are deduplicated by a new leader.

Real etcd, three broker processes (helpers.cluster), and raw requests where a client library cannot
say what is tested.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.cluster_txn import DEADLINE_S, GROUP_KEY, NONE, consume, create_placed, find_coordinator
from helpers.txn_wire import INVALID_TXN_STATE, begin, end_txn, init_producer_id, log_end, lso, produce, txn_batch
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(180)

NOT_LEADER_OR_FOLLOWER, INVALID_REQUEST, TRANSACTION_COORDINATOR_FENCED = 6, 42, 52


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


def test_partition_leaders_ask_the_coordinator_on_another_broker(start_cluster):
    """KIP-890 in a cluster: a leader takes a transactional batch only after the id's coordinator, on
    another broker, confirmed the partition is in the transaction (AddPartitionsToTxn verify_only)."""
    cluster = start_cluster(3)
    coordinator = find_coordinator(cluster, "verify-app")
    others = [n for n in (1, 2, 3) if n != coordinator]
    create_placed(cluster, "checked", [[others[0], others[1], coordinator], [others[1], others[0], coordinator]])
    with WireClient(cluster.brokers[coordinator].port) as c:
        txn = begin(c, "verify-app", "checked", [0])
    with WireClient(cluster.brokers[others[0]].port) as c:
        assert produce(c, "checked", txn_batch(txn, 0, b"in"), "verify-app", partition=0) == NONE
        assert produce(c, "checked", txn_batch(txn, 1, b"in too"), "verify-app", partition=0) == NONE
    with WireClient(cluster.brokers[others[1]].port) as c:
        assert produce(c, "checked", txn_batch(txn, 0, b"out"), "verify-app", partition=1) == INVALID_TXN_STATE, \
            "not in the transaction, says its coordinator"
        assert log_end(c, "checked", 1) == 0
    with WireClient(cluster.brokers[coordinator].port) as c:
        assert end_txn(c, txn, committed=True) == NONE
    assert sorted(consume(cluster, [("checked", 0), ("checked", 1)], 2, "read_committed")) == [
        ("checked", 0, b"in"), ("checked", 0, b"in too")]


def test_a_group_coordinator_asks_the_transaction_coordinator_on_another_broker(start_cluster):
    """TxnOffsetCommit to a group coordinator that does not coordinate the transaction: it asks the broker
    that does whether the group's offsets partition is in the transaction, and the commit marker that
    broker sends makes the offset count."""
    cluster = start_cluster(3)
    coordinator = find_coordinator(cluster, "offsets-app")
    group = next(g for g in (f"group-{i}" for i in range(100))
                 if find_coordinator(cluster, g, GROUP_KEY) != coordinator)
    group_coordinator = find_coordinator(cluster, group, GROUP_KEY)
    create_placed(cluster, "consumed", [[1, 2, 3]])
    with WireClient(cluster.brokers[coordinator].port) as c:
        _, pid, epoch = init_producer_id(c, "offsets-app")
        txn = ("offsets-app", pid, epoch)
    commit = {"transactional_id": "offsets-app", "group_id": group, "producer_id": pid, "producer_epoch": epoch,
              "generation_id": -1, "member_id": "", "group_instance_id": None,
              "topics": [{"name": "consumed", "partitions": [
                  {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                   "committed_metadata": ""}]}]}

    def txn_offset_commit() -> int:
        with WireClient(cluster.brokers[group_coordinator].port) as c:
            return c.request("TxnOffsetCommit", 3, commit)["topics"][0]["partitions"][0]["error_code"]

    assert txn_offset_commit() == INVALID_TXN_STATE, "the group's offsets partition is not in the transaction"
    with WireClient(cluster.brokers[coordinator].port) as c:
        assert c.request("AddOffsetsToTxn", 3, {"transactional_id": "offsets-app", "producer_id": pid,
                                                "producer_epoch": epoch, "group_id": group})["error_code"] == NONE
    assert txn_offset_commit() == NONE
    with WireClient(cluster.brokers[coordinator].port) as c:
        assert end_txn(c, txn, committed=True) == NONE

    def committed_offset() -> int:
        with WireClient(cluster.brokers[group_coordinator].port) as c:
            r = c.request("OffsetFetch", 7, {"group_id": group, "require_stable": True,
                                             "topics": [{"name": "consumed", "partition_indexes": [0]}]})
        return r["topics"][0]["partitions"][0]["committed_offset"]

    cluster.wait_until(lambda: committed_offset() == 7, DEADLINE_S, "the offset committed by the marker")


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
        """The answer of ``node``, once it knows it leads fenced-0 (metadata reaches brokers one by one)."""
        def send() -> int:
            with WireClient(cluster.brokers[node].port) as c:
                r = c.request("WriteTxnMarkers", 1, {"markers": [{
                    "producer_id": pid, "producer_epoch": 0, "transaction_result": False,
                    "coordinator_epoch": coordinator_epoch, "topics": [{"name": "fenced", "partition_indexes": [0]}]}]})
            answers.append(r["markers"][0]["topics"][0]["partitions"][0]["error_code"])
            return answers[-1] != NOT_LEADER_OR_FOLLOWER

        answers: list[int] = []
        cluster.wait_until(send, 30, f"broker {node} leading fenced-0")
        return answers[-1]

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


def test_idempotent_retries_across_a_leader_change_are_deduplicated(start_cluster, monkeypatch):
    """The leader drops a Produce response after its in-sync replicas have the batch (a lost
    acknowledgement) and is killed before the producer retries: the retry reaches the new leader, which
    knows the batch from the replicated producer state and answers it without storing it again."""
    monkeypatch.setenv("MOLDAU_FAULT_DROP_RESPONSE_EVERY", "10")
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("dedup", partitions=1, replication_factor=3)
    leader = cluster.leader("dedup")
    retry_backoff_ms = 4000  # the producer's retry waits this long: the kill comes first
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 2, "retry.backoff.ms": retry_backoff_ms, "retry.backoff.max.ms": retry_backoff_ms,
                  "message.timeout.ms": 120000, "broker.address.family": "v4"})
    acked, failed = [], []

    def on_delivery(err, m):
        (failed if err else acked).append(err or (m.value(), m.offset()))

    values = [f"{i:05d}".encode() for i in range(2000)]
    sent = 0
    log_start = cluster.brokers[leader].log_offset()
    while "response dropped" not in cluster.brokers[leader].log_since(log_start):
        assert sent < 1000, "no Produce response was dropped"
        for v in values[sent:sent + 5]:
            p.produce("dedup", v, partition=0, on_delivery=on_delivery)
        sent += 5
        p.poll(0.05)
    dropped_at = time.monotonic()
    cluster.brokers[leader].kill()
    assert time.monotonic() - dropped_at < retry_backoff_ms / 1000 / 2, "killed before the retry"
    for v in values[sent:]:
        p.produce("dedup", v, partition=0, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(90) == 0
    assert failed == []
    assert cluster.leader("dedup") not in (leader, -1)
    assert sorted(v for v, _ in acked) == values and len({o for _, o in acked}) == len(values)
    assert [v for _, _, v in consume(cluster, [("dedup", 0)], len(values))] == values, "each record once, in order"


def test_a_version_2_write_waits_for_its_partition_to_join_the_transaction(start_cluster):
    """Produce v12 at the leader that also coordinates the id: the partition's addition to the transaction
    must be replicated first (RF=3, min.insync.replicas=2), and the write waits for it (Kafka's verification
    guard, a delayed produce) instead of being answered NOT_ENOUGH_REPLICAS for its client to retry."""
    cluster = start_cluster(3, min_insync_replicas=2)
    coordinator = find_coordinator(cluster, "guard-app")
    others = [n for n in (1, 2, 3) if n != coordinator]
    create_placed(cluster, "guarded", [[coordinator, *others]])
    with WireClient(cluster.brokers[coordinator].port) as c:
        code, pid, epoch = init_producer_id(c, "guard-app")
        assert code == NONE
        for n in range(5):  # each transaction adds the partition anew
            txn = ("guard-app", pid, epoch + n)
            r = c.request("Produce", 12, {"transactional_id": "guard-app", "acks": -1, "timeout_ms": 10000,
                                          "topic_data": [{"name": "guarded", "partition_data": [
                                              {"index": 0, "records": txn_batch(txn, 0, b"v%d" % n)}]}]})
            assert r["responses"][0]["partition_responses"][0]["error_code"] == NONE, f"transaction {n}"
            r = c.request("EndTxn", 5, {"transactional_id": "guard-app", "producer_id": pid,
                                        "producer_epoch": epoch + n, "committed": True})
            assert (r["error_code"], r["producer_epoch"]) == (NONE, epoch + n + 1)
            cluster.wait_until(lambda: c.request("DescribeTransactions", 0, {"transactional_ids": ["guard-app"]})[
                "transaction_states"][0]["transaction_state"] == "CompleteCommit", DEADLINE_S, "the markers")
    assert [v for _, _, v in consume(cluster, [("guarded", 0)], 5, "read_committed")] == [b"v%d" % n for n in range(5)]
