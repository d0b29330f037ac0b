"""Exactly-once against hostile clients: raw requests that once wedged a transaction or gave a wrong read.

Each test sends, below any client library, what a buggy or hostile client
could (issue 15): several batches in one partition's records, an idempotent
write under the producer id of an open transaction, a marker larger than
segment.bytes, OffsetFetch for all partitions with require_stable, and
ListOffsets by timestamp under read_committed. Each one failed before its fix.
"""

from __future__ import annotations

import time

from helpers.txn_wire import (
    INVALID_RECORD,
    INVALID_TXN_STATE,
    MAX_TIMESTAMP,
    NONE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNSTABLE_OFFSET_COMMIT,
    begin,
    create_topic,
    end_txn,
    init_producer_id,
    list_offset,
    log_end,
    lso,
    produce,
    txn_batch,
    wait_for,
)
from helpers.wire import WireClient
from protocol.records import build_batch


# --- finding 1: one batch per partition ---------------------------------------------


def test_a_partition_takes_exactly_one_batch_per_produce(broker):
    """Kafka takes exactly one batch per partition from Produce v3 on. A second batch used to pass
    unchecked and could open a transaction of a producer no coordinator knows."""
    with WireClient(broker.port) as c:
        create_topic(c, "one-batch")
        txn = begin(c, "one-batch-app", "one-batch", [0])
        stranger = ("nobody", txn[1] + 500, 0)  # a transactional producer id no coordinator issued
        for version in (3, 9, 11):
            assert produce(c, "one-batch", txn_batch(txn, 0) + txn_batch(stranger, 0), "one-batch-app",
                           version=version) == INVALID_RECORD
            assert produce(c, "one-batch", build_batch([(None, b"a")]) + build_batch([(None, b"b")]),
                           version=version) == INVALID_RECORD
        assert log_end(c, "one-batch") == 0, "nothing of a refused request is stored"
        assert produce(c, "one-batch", txn_batch(txn, 0), "one-batch-app") == NONE
        assert end_txn(c, txn, committed=True) == NONE
        wait_for(lambda: lso(c, "one-batch") == 2, "the last stable offset passes the commit marker")


# --- finding 2: a non-transactional write during an open transaction ----------------


def test_an_idempotent_write_cannot_join_or_wedge_an_open_transaction(broker):
    """A non-transactional batch under the producer id of an open transaction is INVALID_TXN_STATE,
    whatever its epoch; it used to be taken, and with a higher epoch the commit marker was then refused
    and the committed records stayed invisible to read_committed for good."""
    with WireClient(broker.port) as c:
        create_topic(c, "idem-in-txn")
        txn = begin(c, "idem-in-txn-app", "idem-in-txn", [0])
        pid = txn[1]
        assert produce(c, "idem-in-txn", txn_batch(txn, 0, b"committed"), "idem-in-txn-app") == NONE
        for epoch, seq in ((0, 1), (1, 0), (5, 0)):
            plain = build_batch([(None, b"intruder")], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            assert produce(c, "idem-in-txn", plain) == INVALID_TXN_STATE, f"epoch {epoch}"
        assert log_end(c, "idem-in-txn") == 1

        # an idempotent InitProducerId naming the transactional producer id gets another id
        code, other, epoch = init_producer_id(c, None, pid, 0)
        assert code == NONE and (other, epoch) != (pid, 1), "it must not bump the transactional producer's epoch"
        assert other != pid

        assert end_txn(c, txn, committed=True) == NONE
        wait_for(lambda: lso(c, "idem-in-txn") == 2, "the commit marker lands and the records become stable")
        assert produce(c, "idem-in-txn", txn_batch(txn, 1, b"late")) == INVALID_TXN_STATE, "no transaction is open"


# --- finding 3: a marker larger than segment.bytes ----------------------------------


def test_a_marker_always_fits_whatever_segment_bytes(broker):
    """With segment.bytes between a one-record batch and a control batch, writing the marker used to
    raise in the marker task, which died: PrepareCommit forever, the LSO stuck, and every
    InitProducerId for the id CONCURRENT_TRANSACTIONS."""
    with WireClient(broker.port) as c:
        txn_probe = ("p", 0, 0)
        size = len(txn_batch(txn_probe, 0))
        create_topic(c, "tiny-segments", segment_bytes=str(size + 2))  # a marker is bigger than that
        txn = begin(c, "tiny-app", "tiny-segments", [0])
        assert produce(c, "tiny-segments", txn_batch(txn, 0), "tiny-app") == NONE
        assert end_txn(c, txn, committed=True) == NONE
        wait_for(lambda: lso(c, "tiny-segments") == 2, "the commit marker is written")
        wait_for(lambda: init_producer_id(c, "tiny-app")[0] == NONE, "the transactional id is usable again")
        assert broker.alive()


# --- finding 4: OffsetFetch require_stable for every partition ----------------------


def test_offset_fetch_of_all_partitions_reports_unstable_offsets(broker):
    """topics=null with require_stable must agree with naming the partition: UNSTABLE_OFFSET_COMMIT
    while a transactional offset commit is pending, not the last stable offset."""
    with WireClient(broker.port) as c:
        create_topic(c, "stable-fetch", partitions=2)
        c.request("OffsetCommit", 8, {"group_id": "stable-group", "generation_id_or_member_epoch": -1, "member_id": "",
                                      "group_instance_id": None, "topics": [{"name": "stable-fetch", "partitions": [
                                          {"partition_index": p, "committed_offset": 1, "committed_leader_epoch": -1,
                                           "committed_metadata": ""} for p in (0, 1)]}]})
        code, pid, epoch = init_producer_id(c, "stable-app")
        assert code == NONE
        assert c.request("AddOffsetsToTxn", 3, {"transactional_id": "stable-app", "producer_id": pid,
                                                "producer_epoch": epoch, "group_id": "stable-group"})["error_code"] == NONE
        r = c.request("TxnOffsetCommit", 3, {
            "transactional_id": "stable-app", "group_id": "stable-group", "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [{"name": "stable-fetch",
                "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                "committed_metadata": ""}]}]})
        assert r["topics"][0]["partitions"][0]["error_code"] == NONE

        def by_partition(topics: list[dict]) -> dict[int, tuple[int, int]]:
            return {p["partition_index"]: (p["error_code"], p["committed_offset"])
                    for t in topics if t["name"] == "stable-fetch" for p in t["partitions"]}

        def fetch_all(version: int) -> dict[int, tuple[int, int]]:
            if version >= 8:
                r = c.request("OffsetFetch", version, {"groups": [{"group_id": "stable-group", "topics": None}],
                                                       "require_stable": True})
                return by_partition(r["groups"][0]["topics"])
            r = c.request("OffsetFetch", version, {"group_id": "stable-group", "topics": None, "require_stable": True})
            return by_partition(r["topics"])

        named = c.request("OffsetFetch", 7, {"group_id": "stable-group", "require_stable": True, "topics": [
            {"name": "stable-fetch", "partition_indexes": [0, 1]}]})
        assert by_partition(named["topics"]) == {0: (UNSTABLE_OFFSET_COMMIT, -1), 1: (NONE, 1)}
        for version in (7, 8):
            assert fetch_all(version) == {0: (UNSTABLE_OFFSET_COMMIT, -1), 1: (NONE, 1)}, f"OffsetFetch v{version}"

        assert end_txn(c, ("stable-app", pid, epoch), committed=True) == NONE
        wait_for(lambda: fetch_all(8) == {0: (NONE, 5), 1: (NONE, 1)}, "the committed offset counts")


# --- finding 5: ListOffsets by timestamp under read_committed -----------------------


def test_list_offsets_by_timestamp_stays_below_the_last_stable_offset(broker):
    """A timestamp or MAX_TIMESTAMP lookup with read_committed used to answer an offset of an open
    transaction; Kafka answers only offsets below the last stable offset, else -1."""
    with WireClient(broker.port) as c:
        create_topic(c, "ts-committed")
        base = int(time.time() * 1000) + 600_000  # after the marker's time, so MAX_TIMESTAMP is a record
        assert produce(c, "ts-committed", build_batch([(None, b"plain")], timestamp_ms=base)) == NONE
        txn = begin(c, "ts-app", "ts-committed", [0])
        assert produce(c, "ts-committed", txn_batch(txn, 0, b"open", timestamp_ms=base + 1000), "ts-app") == NONE
        assert produce(c, "ts-committed", build_batch([(None, b"after")], timestamp_ms=base + 2000)) == NONE

        assert list_offset(c, "ts-committed", base, READ_COMMITTED) == (0, base)
        assert list_offset(c, "ts-committed", base + 1, READ_UNCOMMITTED) == (1, base + 1000)
        assert list_offset(c, "ts-committed", base + 1, READ_COMMITTED) == (-1, -1), "offset 1 is not stable yet"
        assert list_offset(c, "ts-committed", base + 1500, READ_COMMITTED) == (-1, -1), "nor is offset 2"
        assert list_offset(c, "ts-committed", MAX_TIMESTAMP, READ_UNCOMMITTED) == (2, base + 2000)
        assert list_offset(c, "ts-committed", MAX_TIMESTAMP, READ_COMMITTED) == (-1, -1)

        assert end_txn(c, txn, committed=True) == NONE
        wait_for(lambda: lso(c, "ts-committed") == 4, "the commit marker is written")
        assert list_offset(c, "ts-committed", base + 1, READ_COMMITTED) == (1, base + 1000)
        assert list_offset(c, "ts-committed", MAX_TIMESTAMP, READ_COMMITTED) == (2, base + 2000)



def test_the_marker_task_logs_and_retries_whatever_fails(start_broker, monkeypatch):
    """An error no code path expects, raised while a marker is written, used to end the marker task:
    the transaction stayed in PrepareCommit and the LSO stuck. Now it is logged and the marker sent again."""
    monkeypatch.setenv("MOLDAU_FAULT_FAIL_TXN_MARKERS", "3")
    b = start_broker()
    with WireClient(b.port) as c:
        create_topic(c, "marker-errors", partitions=2)
        txn = begin(c, "marker-errors-app", "marker-errors", [0, 1])
        for partition in (0, 1):
            assert produce(c, "marker-errors", txn_batch(txn, 0), "marker-errors-app", partition) == NONE
        assert end_txn(c, txn, committed=True) == NONE
        for partition in (0, 1):
            wait_for(lambda: lso(c, "marker-errors", partition) == 2, f"the marker of partition {partition}")
        wait_for(lambda: init_producer_id(c, "marker-errors-app")[0] == NONE, "the transactional id is usable again")
    log = b.log_since_start()
    assert log.count("fault injection (MOLDAU_FAULT_FAIL_TXN_MARKERS)") >= 3 and "will retry" in log
