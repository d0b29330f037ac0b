"""Raw transactional requests for tests that act as a client library never would (tests/helpers/wire.py)."""

from __future__ import annotations

import time

from helpers.wire import WireClient
from protocol.records import build_batch

NONE = 0
INVALID_TXN_STATE = 48
CONCURRENT_TRANSACTIONS = 51
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
LATEST, MAX_TIMESTAMP = -1, -3
DEADLINE_S = 15


def create_topic(c: WireClient, name: str, partitions: int = 1, **configs: str) -> None:
    r = c.request("CreateTopics", 5, {"timeout_ms": 10000, "validate_only": False, "topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]}]})
    assert r["topics"][0]["error_code"] == NONE, r


def init_producer_id(c: WireClient, transactional_id: str | None, producer_id: int = -1, epoch: int = -1,
                     timeout_ms: int = 60000) -> tuple[int, int, int]:
    r = c.request("InitProducerId", 4, {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
                                        "producer_id": producer_id, "producer_epoch": epoch})
    return r["error_code"], r["producer_id"], r["producer_epoch"]


def begin(c: WireClient, transactional_id: str, topic: str, partitions: list[int], timeout_ms: int = 60000
          ) -> tuple[str, int, int]:
    """A new transactional producer with ``partitions`` of ``topic`` in its open transaction."""
    code, pid, epoch = init_producer_id(c, transactional_id, timeout_ms=timeout_ms)
    assert code == NONE
    r = c.request("AddPartitionsToTxn", 3, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": partitions}]})
    assert all(p["partition_error_code"] == NONE for t in r["results_by_topic_v3_and_below"]
               for p in t["results_by_partition"])
    return transactional_id, pid, epoch


def end_txn(c: WireClient, txn: tuple[str, int, int], committed: bool) -> int:
    return c.request("EndTxn", 3, {"transactional_id": txn[0], "producer_id": txn[1], "producer_epoch": txn[2],
                                   "committed": committed})["error_code"]


def produce(c: WireClient, topic: str, records: bytes, transactional_id: str | None = None, partition: int = 0,
            version: int = 9) -> int:
    r = c.request("Produce", version, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 10000,
                                       "topic_data": [{"name": topic, "partition_data": [
                                           {"index": partition, "records": records}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def txn_batch(txn: tuple[str, int, int], seq: int, *values: bytes, timestamp_ms: int | None = None) -> bytes:
    return build_batch([(None, v) for v in values or (b"x",)], producer_id=txn[1], producer_epoch=txn[2],
                       base_sequence=seq, transactional=True, timestamp_ms=timestamp_ms)


def list_offset(c: WireClient, topic: str, timestamp: int, isolation: int, partition: int = 0) -> tuple[int, int]:
    """(offset, timestamp) of ListOffsets v7."""
    r = c.request("ListOffsets", 7, {"replica_id": -1, "isolation_level": isolation, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    part = r["topics"][0]["partitions"][0]
    assert part["error_code"] == NONE
    return part["offset"], part["timestamp"]


def lso(c: WireClient, topic: str, partition: int = 0) -> int:
    return list_offset(c, topic, LATEST, READ_COMMITTED, partition)[0]


def log_end(c: WireClient, topic: str, partition: int = 0) -> int:
    return list_offset(c, topic, LATEST, READ_UNCOMMITTED, partition)[0]


def wait_for(condition, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.05)
