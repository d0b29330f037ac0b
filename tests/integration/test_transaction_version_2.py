"""Transaction version 2 (KIP-890 part 2): the epoch bumped at every commit and abort.

The broker finalizes transaction.version 2 in ApiVersions. Java kafka-clients
4.3 then sends EndTxn v5 (and takes the bumped epoch from its answer), lets
Produce v12 add partitions to the transaction and TxnOffsetCommit v5 add the
group's offsets (no AddPartitionsToTxn or AddOffsetsToTxn). Raw requests pin
the rules a client library hides: retries name the epoch before the bump, a
late write of a finished transaction is fenced by its epoch alone, an abort
with nothing open bumps too, and a restart between EndTxn and its markers
keeps the bumped epoch. Clients of version 1 are the rest of the suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.java_clients import JavaClients, every, only
from helpers.txn_wire import (
    INVALID_TXN_STATE,
    NONE,
    READ_COMMITTED,
    create_topic,
    init_producer_id,
    log_end,
    lso,
    txn_batch,
    wait_for,
)
from helpers.wire import WireClient

SOURCE = Path(__file__).resolve().parents[1] / "java" / "TransactionsV2.java"
INVALID_PRODUCER_EPOCH = 47
CONCURRENT_TRANSACTIONS = 51
NOT_ENOUGH_REPLICAS = 19
PRODUCER_FENCED = 90


@pytest.fixture(scope="module")
def java4(tmp_path_factory) -> JavaClients:
    return JavaClients.build_4x(tmp_path_factory.mktemp("java4"), SOURCE)  # missing JDK or jar: make test-deps


def describe(c: WireClient, transactional_id: str) -> dict:
    return c.request("DescribeTransactions", 0, {"transactional_ids": [transactional_id]})["transaction_states"][0]


def producers(c: WireClient, topic: str, partition: int) -> list[dict]:
    r = c.request("DescribeProducers", 0, {"topics": [{"name": topic, "partition_indexes": [partition]}]})
    return r["topics"][0]["partitions"][0]["active_producers"]


def test_java_4_client_bumps_the_epoch_at_every_transaction(broker, java4):
    with WireClient(broker.port) as c:
        create_topic(c, "tv2", partitions=2)
    count = 11  # the last one commits, so both partitions end with its marker
    lines = java4.run(broker.bootstrap, "tv2", "tv2-app", count, "tv2-group")
    committed = [line["i"] for line in every(lines, "txn") if line["committed"]]
    assert len(committed) == 9
    assert only(lines, "read")["values"] == [f"v2-{i}-{p}" for p in (0, 1) for i in committed]
    with WireClient(broker.port) as c:
        state = describe(c, "tv2-app")
        assert (state["transaction_state"], state["producer_epoch"]) == ("CompleteCommit", count), \
            "one bump per transaction: the client spoke transaction version 2"
        for partition in (0, 1):
            (producer,) = producers(c, "tv2", partition)
            assert (producer["producer_epoch"], producer["current_txn_start_offset"]) == (count, -1), \
                "the last marker carried the bumped epoch"
        r = c.request("OffsetFetch", 7, {"group_id": "tv2-group", "require_stable": True,
                                         "topics": [{"name": "tv2", "partition_indexes": [0]}]})
        part = r["topics"][0]["partitions"][0]
        assert (part["error_code"], part["committed_offset"]) == (NONE, 9), "offsets of committed transactions only"


# --- raw requests -------------------------------------------------------------------


def produce_v12(c: WireClient, txn: tuple[str, int, int], topic: str, partition: int, seq: int,
                version: int = 12) -> int:
    r = c.request("Produce", version, {"transactional_id": txn[0], "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": txn_batch(txn, seq)}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def end_txn_v5(c: WireClient, txn: tuple[str, int, int], committed: bool) -> tuple[int, int, int]:
    r = c.request("EndTxn", 5, {"transactional_id": txn[0], "producer_id": txn[1], "producer_epoch": txn[2],
                                "committed": committed})
    return r["error_code"], r["producer_id"], r["producer_epoch"]


def settle(c: WireClient, transactional_id: str) -> str:
    """The state once the markers are in."""
    wait_for(lambda: describe(c, transactional_id)["transaction_state"] in ("CompleteCommit", "CompleteAbort", "Empty"),
             f"{transactional_id}'s markers")
    return describe(c, transactional_id)["transaction_state"]


def test_the_version_2_wire_rules(broker):
    with WireClient(broker.port) as c:
        r = c.request("ApiVersions", 3, {"client_software_name": "moldau-test", "client_software_version": "1"})
        assert [(f["name"], f["min_version_level"], f["max_version_level"]) for f in r["finalized_features"]] == [
            ("transaction.version", 2, 2), ("share.version", 1, 1)]
        create_topic(c, "tv2-wire", partitions=2)
        code, pid, epoch = init_producer_id(c, "wire-v2")
        assert (code, epoch) == (NONE, 0)
        txn = ("wire-v2", pid, 0)

        assert produce_v12(c, txn, "tv2-wire", 0, 0, version=11) == INVALID_TXN_STATE, "v11 adds nothing"
        assert produce_v12(c, txn, "tv2-wire", 0, 0) == NONE, "v12 adds the partition to the transaction"
        assert describe(c, "wire-v2")["topics"] == [{"topic": "tv2-wire", "partitions": [0]}]
        assert end_txn_v5(c, txn, committed=True) == (NONE, pid, 1), "the answer names the bumped epoch"
        assert end_txn_v5(c, txn, committed=True) in ((CONCURRENT_TRANSACTIONS, -1, -1), (NONE, pid, 1)), "a retry"
        assert settle(c, "wire-v2") == "CompleteCommit"
        assert end_txn_v5(c, txn, committed=True) == (NONE, pid, 1), "a retry after the markers"
        assert end_txn_v5(c, txn, committed=False) == (INVALID_TXN_STATE, -1, -1)
        assert produce_v12(c, txn, "tv2-wire", 0, 1) == INVALID_PRODUCER_EPOCH, "a late write: fenced by epoch alone"
        assert (lso(c, "tv2-wire"), log_end(c, "tv2-wire")) == (2, 2)

        # the next transaction at the bumped epoch; an abort with nothing written bumps too
        txn = ("wire-v2", pid, 1)
        assert end_txn_v5(c, txn, committed=True) == (INVALID_TXN_STATE, -1, -1), "nothing is open to commit"
        assert end_txn_v5(c, txn, committed=False) == (NONE, pid, 2), "an empty abort"
        assert settle(c, "wire-v2") == "CompleteAbort"
        assert end_txn_v5(c, txn, committed=False) == (NONE, pid, 2), "its retry"
        assert end_txn_v5(c, ("wire-v2", pid, 0), committed=False) == (PRODUCER_FENCED, -1, -1), "two epochs back"

        # TxnOffsetCommit v5 adds the group's offsets partition; Produce v12 during the markers is retried
        txn = ("wire-v2", pid, 2)
        commit = {"transactional_id": "wire-v2", "group_id": "wire-v2-group", "producer_id": pid, "producer_epoch": 2,
                  "generation_id": -1, "member_id": "", "group_instance_id": None,
                  "topics": [{"name": "tv2-wire", "partitions": [{"partition_index": 1, "committed_offset": 7,
                                                                  "committed_leader_epoch": -1,
                                                                  "committed_metadata": ""}]}]}
        assert c.request("TxnOffsetCommit", 4, commit)["topics"][0]["partitions"][0]["error_code"] == INVALID_TXN_STATE
        assert c.request("TxnOffsetCommit", 5, commit)["topics"][0]["partitions"][0]["error_code"] == NONE
        assert produce_v12(c, txn, "tv2-wire", 1, 0) == NONE
        assert end_txn_v5(c, txn, committed=True) == (NONE, pid, 3)
        during = produce_v12(c, ("wire-v2", pid, 3), "tv2-wire", 1, 0)
        assert during in (NONE, NOT_ENOUGH_REPLICAS), "CONCURRENT_TRANSACTIONS reaches a producer as retriable"
        if during == NONE:  # the markers were in already, and this write opened the next transaction
            assert end_txn_v5(c, ("wire-v2", pid, 3), committed=False) == (NONE, pid, 4)
        settle(c, "wire-v2")
        r = c.request("OffsetFetch", 7, {"group_id": "wire-v2-group", "require_stable": True,
                                         "topics": [{"name": "tv2-wire", "partition_indexes": [1]}]})
        assert r["topics"][0]["partitions"][0]["committed_offset"] == 7

        # version 1 requests of the same id keep version 1's rules
        code, pid, epoch = init_producer_id(c, "wire-v2", producer_id=pid, epoch=describe(c, "wire-v2")["producer_epoch"])
        assert code == NONE
        v1 = c.request("EndTxn", 4, {"transactional_id": "wire-v2", "producer_id": pid, "producer_epoch": epoch,
                                     "committed": True})
        assert v1["error_code"] == INVALID_TXN_STATE


def test_a_restart_between_end_txn_and_its_markers_keeps_the_bumped_epoch(start_broker):
    b = start_broker()
    with WireClient(b.port) as c:
        create_topic(c, "tv2-crash")
        _, pid, _ = init_producer_id(c, "crash-v2")
        txn = ("crash-v2", pid, 0)
        assert produce_v12(c, txn, "tv2-crash", 0, 0) == NONE
        assert end_txn_v5(c, txn, committed=True) == (NONE, pid, 1)
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        assert settle(c, "crash-v2") == "CompleteCommit"
        assert describe(c, "crash-v2")["producer_epoch"] == 1
        wait_for(lambda: lso(c, "tv2-crash") == log_end(c, "tv2-crash") >= 2, "the commit is stable")
        assert end_txn_v5(c, txn, committed=True) == (NONE, pid, 1), "a retry after the restart"
        assert produce_v12(c, ("crash-v2", pid, 1), "tv2-crash", 0, 0) == NONE, "the next transaction"
        r = c.request("Fetch", 12, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                    "isolation_level": READ_COMMITTED, "topics": [{"topic": "tv2-crash", "partitions": [
                                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        assert r["responses"][0]["partitions"][0]["aborted_transactions"] == []


def _write_state(broker, transactional_id: str, producer_id: int, epoch: int) -> None:
    """Append the id's state (CompleteCommit at ``epoch``) to __transaction_state while the broker is down."""
    from broker.coordinator.internal_topics import partition_for
    from broker.coordinator.internal_topics import TRANSACTION_STATE_TOPIC
    from broker.transaction.metadata import COMPLETE_COMMIT, TxnTransitMetadata
    from broker.transaction.records import transaction_key, transaction_value
    from protocol.records import build_batch, read_header
    from storage.config import LogConfig
    from storage.log import Log

    state_log = Log(broker.partition_dir(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, 50)), LogConfig())
    state = TxnTransitMetadata(producer_id, epoch, -1, 60000, COMPLETE_COMMIT, frozenset(), -1, 0)
    buf = bytearray(build_batch([(transaction_key(transactional_id), transaction_value(state))]))
    state_log.append(buf, [(0, read_header(buf))], 0)
    state_log.close()


def test_used_up_epochs_hand_over_to_a_new_producer_id(start_broker):
    """Near the end of the epochs (written into __transaction_state while the broker is down, rather than
    32,000 transactions): the EndTxn that uses them up answers a new producer id at epoch 0, a retry of it
    gets the same, and the old id is fenced."""
    from broker.transaction.metadata import MAX_EPOCH

    b = start_broker()
    with WireClient(b.port) as c:
        create_topic(c, "tv2-overflow")
        _, pid, _ = init_producer_id(c, "overflow-v2")
    b.stop()
    _write_state(b, "overflow-v2", pid, MAX_EPOCH - 2)
    b.start()

    with WireClient(b.port) as c:
        for epoch in (MAX_EPOCH - 2, MAX_EPOCH - 1):  # each epoch's sequences start at 0
            txn = ("overflow-v2", pid, epoch)
            assert produce_v12(c, txn, "tv2-overflow", 0, 0) == NONE
            code, next_pid, next_epoch = end_txn_v5(c, txn, committed=True)
            settle(c, "overflow-v2")
        assert code == NONE and next_pid != pid and next_epoch == 0, (code, next_pid, next_epoch)
        assert end_txn_v5(c, txn, committed=True) == (NONE, next_pid, 0), "a retry of the EndTxn that used them up"
        assert describe(c, "overflow-v2")["producer_id"] == next_pid
        assert produce_v12(c, txn, "tv2-overflow", 0, 1) != NONE, "the old id is done"
        assert produce_v12(c, ("overflow-v2", next_pid, 0), "tv2-overflow", 0, 0) == NONE
        assert end_txn_v5(c, ("overflow-v2", next_pid, 0), committed=True) == (NONE, next_pid, 1)
        settle(c, "overflow-v2")
        assert lso(c, "tv2-overflow") == log_end(c, "tv2-overflow") == 6


def test_the_new_producer_id_survives_a_crash_before_the_markers(start_broker, monkeypatch):
    """The EndTxn that uses up the epochs answers the new producer id before its markers are out; it is
    in __transaction_state with PrepareCommit, so a crash then does not lose it."""
    from broker.transaction.metadata import MAX_EPOCH

    b = start_broker()
    with WireClient(b.port) as c:
        create_topic(c, "tv2-overflow-crash", partitions=2)
        _, pid, _ = init_producer_id(c, "overflow-crash-v2")
    b.stop()
    _write_state(b, "overflow-crash-v2", pid, MAX_EPOCH - 1)
    monkeypatch.setenv("MOLDAU_FAULT_KILL_AFTER_TXN_MARKERS", "1")
    b.start()
    with WireClient(b.port) as c:
        txn = ("overflow-crash-v2", pid, MAX_EPOCH - 1)
        for partition in (0, 1):
            assert produce_v12(c, txn, "tv2-overflow-crash", partition, 0) == NONE
        code, next_pid, next_epoch = end_txn_v5(c, txn, committed=True)
        assert code == NONE and next_pid != pid and next_epoch == 0
    b.proc.wait(30)  # killed by the fault after the first of the two markers
    monkeypatch.delenv("MOLDAU_FAULT_KILL_AFTER_TXN_MARKERS")
    b.start()
    with WireClient(b.port) as c:
        assert settle(c, "overflow-crash-v2") == "CompleteCommit"
        assert describe(c, "overflow-crash-v2")["producer_id"] == next_pid, "the id the client was given"
        assert end_txn_v5(c, txn, committed=True) == (NONE, next_pid, 0), "a retry after the restart"
        assert produce_v12(c, ("overflow-crash-v2", next_pid, 0), "tv2-overflow-crash", 0, 0) == NONE
